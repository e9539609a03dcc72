"""What drafted greedy decoding proposes: the unedited model's answer, followed where the row follows it.

A row's draft is the unedited model's generated tokens for the same request (:class:`RowDraft`).
It is proposed from its start. After a token that departs from it, the row is re-anchored by
lookup: the longest suffix (at most :data:`MAX_NGRAM` tokens) of what the row has generated that
occurs in the draft (the occurrence nearest to where the row was in it) proposes the tokens that
follow that occurrence. The row's own earlier tokens are looked up too (the latest occurrence
wins; the draft wins a tie): an answer that repeats itself, as a pruned model's often does until
``max_gen_toks``, proposes its next lap. Where nothing matches, the row proposes nothing until a
later token does.

Prompt lookup (``context``: the request's prompt tokens): a row without an answer to draft from (the
unedited model's own evaluation, a request the store lacks) looks the suffix up in its own earlier
tokens and then in its prompt (the latest occurrence), proposing what followed it there: a solution
quotes its problem's numbers and phrases, a chain of thought its exemplars' wording.

:class:`DraftPlanner` decides how many proposed tokens a pass verifies. Adaptive (the default):
the length that maximises the tokens a pass is expected to produce per unit of its cost, from the
acceptance seen so far in this call (counted per kind of anchor: the draft's start, a long
agreement, a 3-, 2- or 1-token match) and the cost of one verified token relative to a pass
(``token_cost``: small where a pass costs about the same for 1 or 100 tokens, as on a GPU).
Fixed (``eval.draft_tokens = k``): the first pass verifies the whole draft, every later proposal is
at most ``k`` tokens. Every decision depends on tokens only, never on
timings, so a run is reproducible.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

MAX_NGRAM = 3  # the longest generated suffix looked up in the draft
OWN_LAPS_LIMIT = 1 << 16  # what a row repeating itself may propose (the budget caps it)
ALIGNED = 4  # this many trailing tokens agreeing with the draft make a row "aligned"
# Prior (accepted, rejected) counts per anchor kind: the acceptance expected before any is seen.
PRIORS = {"start": (8.0, 1.0), "aligned": (8.0, 1.0), "ngram3": (3.0, 1.0), "ngram2": (2.0, 1.0),
          "ngram1": (1.0, 1.0)}
# Draft lengths the adaptive planner considers for a pass (the longest any row of it proposes).
CANDIDATE_LENGTHS = (0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)


class RowDraft:
    """One row's draft (the unedited model's answer) and where the row stands in it, in its own earlier
    tokens or in its prompt (``source``: the list proposed from).

    ``context``: the prompt's tokens, looked up after the answer and the row's own tokens (None: not
    looked up). A row with an empty answer and a context drafts by prompt lookup alone.
    """

    def __init__(self, answer: Sequence[int], context: Sequence[int] | None = None) -> None:
        self.answer = [int(t) for t in answer]
        self._ends: dict[tuple[int, ...], list[int]] = {}  # n-gram -> end positions with a token after them
        for n in range(1, MAX_NGRAM + 1):
            for end in range(n, len(self.answer)):
                self._ends.setdefault(tuple(self.answer[end - n:end]), []).append(end)
        self.context = [int(t) for t in context] if context is not None else []
        self._context_ends: dict[tuple[int, ...], int] = {}  # n-gram of the prompt -> latest end with a token after
        for end in range(1, len(self.context)):
            for n in range(1, min(MAX_NGRAM, end) + 1):
                self._context_ends[tuple(self.context[end - n:end])] = end
        self.source: list[int] = self.answer
        self.pos: int | None = 0 if self.answer else None  # index in ``source`` of the next token proposed
        self.kind: str | None = "start" if self.answer else None
        self._near = 0  # where in the answer the row last was (lookups prefer occurrences near it)
        self._own_ends: dict[tuple[int, ...], int] = {}  # n-gram of the row's tokens -> latest end with a token after
        self._own_indexed = 0  # the row's tokens indexed so far

    def available(self) -> int:
        """How many tokens the row can propose now (its own tokens: as many as asked, see ``proposal``)."""
        if self.pos is None:
            return 0
        return OWN_LAPS_LIMIT if self._looping else len(self.source) - self.pos

    @property
    def _looping(self) -> bool:
        """Whether the row proposes from its own tokens (repeated as a loop would)."""
        return self.source is not self.answer and self.source is not self.context

    def proposal(self, length: int) -> list[int]:
        """The next ``length`` proposed tokens (fewer at the draft's end; none while unanchored). From the
        row's own tokens: what followed the suffix's latest occurrence, repeated as a loop would."""
        if self.pos is None or length <= 0:
            return []
        if not self._looping:
            return self.source[self.pos:self.pos + length]
        lap = self.source[self.pos:]
        return [lap[i % len(lap)] for i in range(length)]

    def advance(self, generated: list[int], proposed: int, accepted: int) -> None:
        """Move past a pass in which ``accepted`` of ``proposed`` tokens were the model's own and
        ``generated[-1]`` is the model's next token (``generated``: the row's tokens so far, a list the
        caller extends in place)."""
        if self.pos is not None:
            after = self.pos + accepted
            if self.source is self.answer:
                self._near = after
            # (from the row's own tokens, ``after`` is at most the second-last: ``generated`` grew by accepted + 1)
            if accepted == proposed and after < len(self.source) and self.source[after] == generated[-1]:
                self.pos = after + 1
                self.kind = self._kind(generated)
                return
        self._anchor(generated)

    def _anchor(self, generated: list[int]) -> None:
        """Re-anchor by the longest suffix of ``generated`` found in the answer, earlier in ``generated`` or in
        the prompt, in that order for a suffix of one length (None: found in none)."""
        self._index_own(generated)
        for n in range(min(MAX_NGRAM, len(generated)), 0, -1):
            key = tuple(generated[-n:])
            ends = self._ends.get(key)
            if ends:
                i = bisect.bisect_left(ends, self._near)
                options = ends[max(i - 1, 0):i + 1]
                end = min(options, key=lambda e: (abs(e - self._near), -e))
                self.source, self.pos = self.answer, end
                self._near = end
                self.kind = self._kind(generated)
                return
            own = self._own_ends.get(key)
            if own is not None:  # the row repeats itself: propose what followed last time
                self.source, self.pos = generated, own
                self.kind = self._kind(generated)
                return
            quoted = self._context_ends.get(key)
            if quoted is not None:  # the row quotes its prompt: propose what followed there
                self.source, self.pos = self.context, quoted
                self.kind = self._kind(generated)
                return
        self.pos, self.kind = None, None

    def _index_own(self, generated: Sequence[int]) -> None:
        """Index the n-grams of ``generated`` that have a token after them (all but its last token's)."""
        for end in range(max(self._own_indexed, 1), len(generated)):
            for n in range(1, min(MAX_NGRAM, end) + 1):
                self._own_ends[tuple(generated[end - n:end])] = end
        self._own_indexed = max(self._own_indexed, len(generated))

    def _kind(self, generated: Sequence[int]) -> str:
        """How well the row is anchored: by how many trailing generated tokens agree with the source."""
        support = 0
        while (support < ALIGNED and support < len(generated) and support < self.pos
               and generated[-1 - support] == self.source[self.pos - 1 - support]):
            support += 1
        return "aligned" if support >= ALIGNED else f"ngram{max(support, 1)}"


class DraftPlanner:
    """How many proposed tokens each row verifies in a pass; learns acceptance per anchor kind.

    ``token_cost``: the cost of one more token in a pass relative to a pass's fixed cost;
    ``fixed``: ``eval.draft_tokens`` (None: adaptive); ``max_pass_tokens``: the most logits
    positions (rows x verified tokens) one pass may return.
    """

    def __init__(self, token_cost: float, fixed: int | None = None, max_pass_tokens: int = 512) -> None:
        self.token_cost = float(token_cost)
        self.fixed = fixed
        self.max_pass_tokens = max(1, int(max_pass_tokens))
        self.counts = {kind: list(prior) for kind, prior in PRIORS.items()}

    def rate(self, kind: str) -> float:
        """The estimated chance that a proposed token of this kind is accepted, given the one before it was."""
        accepted, rejected = self.counts[kind]
        return accepted / (accepted + rejected)

    def expected(self, kind: str | None, length: int) -> float:
        """Expected accepted tokens of a proposal of ``length`` tokens (acceptance stops at the first miss)."""
        if kind is None or length <= 0:
            return 0.0
        a = self.rate(kind)
        return a * (1.0 - a ** length) / (1.0 - a)

    def observe(self, kind: str | None, proposed: int, accepted: int) -> None:
        """Count a verified proposal: ``accepted`` of its ``proposed`` tokens before the first miss."""
        if kind is None or proposed <= 0:
            return
        self.counts[kind][0] += accepted
        if accepted < proposed:
            self.counts[kind][1] += 1

    def plan(self, rows: Sequence[tuple[str | None, int]], base_width: int, room: int) -> list[int]:
        """Per row, how many of its proposed tokens the next pass verifies.

        ``rows``: per row, its anchor kind and how many tokens it can propose (already capped by what
        its budget leaves); ``base_width``: the columns the pass has anyway (1, or the prompt suffix in
        the first pass); ``room``: the most proposed tokens a row may add (a sliding window's limit).
        """
        n = len(rows)
        cap = min(room, self.max_pass_tokens // max(n, 1) - 1, max((a for _, a in rows), default=0))
        if cap <= 0:
            return [0] * n
        if self.fixed is not None:
            wanted = [a if kind == "start" else min(self.fixed, a) for kind, a in rows]
            return [min(w, cap) for w in wanted]
        best, best_value = 0, None
        for length in [c for c in CANDIDATE_LENGTHS if c < cap] + [cap]:
            gain = sum(1.0 + self.expected(kind, min(length, a)) for kind, a in rows)
            value = gain / (1.0 + self.token_cost * n * (base_width + length))
            if best_value is None or value > best_value * (1.0 + 1e-9):
                best, best_value = length, value
        return [min(best, a) for _, a in rows]


__all__ = ["ALIGNED", "CANDIDATE_LENGTHS", "DraftPlanner", "MAX_NGRAM", "OWN_LAPS_LIMIT", "PRIORS", "RowDraft"]
