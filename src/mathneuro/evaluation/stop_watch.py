"""Whether a row of generated tokens contains one of lm-eval's stop strings (its ``until``)."""

from __future__ import annotations

from collections.abc import Sequence


class StopWatch:
    """Whether a row's generated tokens contain one of the stop strings (lm-eval's ``until``).

    Checks a window of the last tokens after each token (decoded with special tokens, as lm-eval's
    stopping criterion does) and confirms a hit on the whole decoded text.
    """

    def __init__(self, tokenizer, stop: Sequence[str]) -> None:
        self.tokenizer = tokenizer
        self.stop = [s for s in stop if s]
        longest = max((len(tokenizer.encode(s, add_special_tokens=False)) for s in self.stop), default=0)
        self.window = longest + 8

    def finished(self, tokens: list[int]) -> bool:
        """Whether ``tokens`` (a row's generated tokens so far) contain a stop string."""
        if not self.stop:
            return False
        tail = self.tokenizer.decode(tokens[-self.window:], skip_special_tokens=False)
        if not any(s in tail for s in self.stop):
            return False
        full = self.tokenizer.decode(tokens, skip_special_tokens=False)
        return any(s in full for s in self.stop)


__all__ = ["StopWatch"]
