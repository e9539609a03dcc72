"""Log-likelihood requests scored with less repeated work: a shared context runs once for all its choices.

:class:`SharedContextScoring` is the log-likelihood half of
:class:`~mathneuro.evaluation.decoding.prefix_cache.PrefixCacheHFLM`; it relies on that class's
``_model_reason``, ``_pad_id``, ``_autocast``, ``_mark_unsupported`` and ``prefix_stats``.
"""

from __future__ import annotations

from tqdm import tqdm

from mathneuro.evaluation.decoding.gqa_attention import grouped_query_attention
from mathneuro.evaluation.decoding.prefix_stats import PrefixStats
from mathneuro.evaluation.decoding.shared_context import score_shared_context, shared_context_groups
from mathneuro.evaluation.last_token import one_token_groups, score_last_tokens


class SharedContextScoring:
    """Mixin over lm-eval's ``HFLM``: ``_loglikelihood_tokens`` that runs each shared context once."""

    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, override_bs: int | None = None):
        """lm-eval's ``_loglikelihood_tokens``, computed with less repeated work and memory.

        - Requests sharing one context with multi-token continuations (the choices of RACE, with
          its ~1,000-token article) run the context once: one forward pass over it, then every
          continuation but its last token in one batch that continues from the context's cache.
        - Requests whose continuation is one token (MMLU's answer letters) run each distinct
          context once, left-padded in batches of ``batch_size``, and keep the last position's
          logits only, where lm-eval keeps every position's (``batch x length x vocabulary``).

        The log-probabilities and greedy flags are lm-eval's up to floating-point rounding. The
        rest (contexts shared by no other or shorter than ``min_prefix_tokens``, truncated
        requests, ``batch_size="auto"`` for one-token requests, models that cannot take a cache or
        left padding) take lm-eval's path.
        """
        with grouped_query_attention(self.model):
            return self._loglikelihood_in_parts(requests, disable_tqdm, override_bs)

    def _loglikelihood_in_parts(self, requests, disable_tqdm: bool, override_bs: int | None):
        self.prefix_stats = PrefixStats()
        answers: list[tuple[float, bool] | None] = [None] * len(requests)
        shared = shared_context_groups(requests, self.min_prefix_tokens, self.max_length)
        longest = max((len(c) + len(requests[i][2]) for c, m in shared.items() for i in m), default=0)
        if shared and self._model_reason(longest) is None and not self._score_shared(requests, shared, answers):
            # the model gave no expandable cache: lm-eval's path for everything
            return super()._loglikelihood_tokens(requests, disable_tqdm=disable_tqdm, override_bs=override_bs)
        self._score_one_token(requests, answers, disable_tqdm)
        rest = [i for i, answer in enumerate(answers) if answer is None]
        if rest:
            plain = super()._loglikelihood_tokens([requests[i] for i in rest], disable_tqdm=disable_tqdm,
                                                  override_bs=override_bs)
            for i, answer in zip(rest, plain, strict=True):
                answers[i] = answer
        return answers

    def _answer(self, requests, answers: list, index: int, answer: tuple[float, bool]) -> None:
        answers[index] = answer
        if requests[index][0] is not None:
            self.cache_hook.add_partial("loglikelihood", requests[index][0], answer)

    def _score_shared(self, requests, shared: dict[tuple[int, ...], list[int]], answers: list) -> bool:
        """Score the shared-context groups into ``answers``; False if the model returned no expandable cache."""
        for context, members in shared.items():
            scored = score_shared_context(self.model, list(context), [requests[i][2] for i in members],
                                          pad_id=self._pad_id(), softmax_dtype=self.softmax_dtype,
                                          autocast=self._autocast)
            if scored is None:
                self._mark_unsupported("the model returned no expandable cache")
                return False
            for i, answer in zip(members, scored, strict=True):
                self._answer(requests, answers, i, answer)
            self.prefix_stats.shared_contexts += 1
            self.prefix_stats.context_tokens_skipped += (len(members) - 1) * len(context)
        return True

    def _score_one_token(self, requests, answers: list, disable_tqdm: bool) -> None:
        """Score the unanswered one-token requests into ``answers`` from each context's last position."""
        if not isinstance(self.batch_size, int):  # "auto": lm-eval sizes its own batches
            return
        open_ = [i for i, answer in enumerate(answers) if answer is None]
        groups = [(context, [open_[j] for j in members]) for context, members
                  in one_token_groups([requests[i] for i in open_], self.max_length).items()]
        if not groups or self._model_reason(max(len(c) for c, _ in groups) + 1) is not None:
            return
        with tqdm(total=sum(len(m) for _, m in groups), disable=disable_tqdm or self.rank != 0,
                  desc="Running loglikelihood requests (last position)") as bar:
            for g, scored in score_last_tokens(self.model, [(c, [requests[i][2][0] for i in m]) for c, m in groups],
                                               pad_id=self._pad_id(), batch_size=self.batch_size,
                                               softmax_dtype=self.softmax_dtype, autocast=self._autocast):
                for i, answer in zip(groups[g][1], scored, strict=True):
                    self._answer(requests, answers, i, answer)
                bar.update(len(scored))
        self.prefix_stats.last_token_contexts += len(groups)
        self.prefix_stats.last_token_requests += sum(len(m) for _, m in groups)
