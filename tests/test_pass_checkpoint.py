"""A statistics pass cut short resumes from its checkpoint: it skips the batches it had finished and
its statistics are bit-identical to those of an uninterrupted pass."""

from __future__ import annotations

import logging
import os
import shutil
import signal

import pytest
import torch

from mathneuro.models.targets import base_model
from mathneuro.models.tiny import tiny_model
from mathneuro.statistics.cache import StatisticsCache, cached_statistics
from mathneuro.statistics.checkpoint import PassCheckpoint
from mathneuro.statistics.passes import collect_statistics, length_sorted_batches, tokenize
from mathneuro.util.signals import checkpoint_on_sigterm, checkpoint_requested, request_checkpoint

KINDS = ("linear_inputs", "activation_counts")
BATCH = 4
TEXTS = [f"Problem {i}: {i} plus {i * 7 % 13} is {i + i * 7 % 13}. " * (1 + i % 5) for i in range(38)]


@pytest.fixture(scope="module")
def tiny():
    return tiny_model("llama")


def num_batches(tok) -> int:
    return len(length_sorted_batches([len(r) for r in tokenize(tok, TEXTS, 64)], BATCH))


class Stop(Exception):
    """What the test's hook raises to cut a pass short (as a timeout's SystemExit would)."""


def watch(model, on_batch):
    """Call ``on_batch(n)`` at the start of the decoder's n-th forward (1-based); returns the hook and the count."""
    calls = []

    def pre_hook(_module, _args, _kwargs):
        calls.append(1)
        on_batch(len(calls))

    handle = base_model(model).register_forward_pre_hook(pre_hook, with_kwargs=True)
    return handle, calls


def run(model, tok, checkpoint=None):
    return collect_statistics(model, tok, TEXTS, kinds=KINDS, batch_size=BATCH, max_length=64, progress=False,
                              kernel="eager", checkpoint=checkpoint)


def assert_identical(a, b):
    assert set(a) == set(b)
    for kind in a:
        assert a[kind].num_tokens == b[kind].num_tokens and a[kind].num_samples == b[kind].num_samples
        assert set(a[kind].tensors) == set(b[kind].tensors)
        for name, tensor in a[kind].tensors.items():
            assert tensor.dtype == b[kind].tensors[name].dtype
            assert torch.equal(tensor, b[kind].tensors[name]), name  # bit for bit


def interrupt_at(n):
    def on_batch(i):
        if i == n:
            raise Stop

    return on_batch


def test_an_interrupted_pass_resumes_after_its_finished_batches_with_identical_statistics(tiny, tmp_path):
    model, tok = tiny
    total = num_batches(tok)
    assert total >= 8
    whole = run(model, tok)
    ckpt = PassCheckpoint(tmp_path / "pass.safetensors", {"pass": 1}, every_s=1e9)  # saved only when cut short
    handle, _ = watch(model, interrupt_at(5))  # stopped during batch 5: batches 1-4 are finished
    with pytest.raises(Stop):
        run(model, tok, ckpt)
    handle.remove()
    assert ckpt.path.is_file()
    resumed_ckpt = PassCheckpoint(tmp_path / "pass.safetensors", {"pass": 1}, every_s=1e9)  # a new process
    handle, calls = watch(model, lambda i: None)
    resumed = run(model, tok, resumed_ckpt)
    handle.remove()
    assert resumed_ckpt.resumed_from == 4
    assert len(calls) == total - 4  # the finished batches were not run again
    assert_identical(resumed, whole)


def test_periodic_checkpoints_survive_a_kill_that_saves_nothing(tiny, tmp_path):
    model, tok = tiny
    whole = run(model, tok)
    path, kept = tmp_path / "pass.safetensors", tmp_path / "kept.safetensors"

    def on_batch(i):
        if i == 4:  # as SIGKILL would find it: the file the periodic saves left after batch 3
            shutil.copy(path, kept)
            raise Stop

    handle, _ = watch(model, on_batch)
    with pytest.raises(Stop):
        run(model, tok, PassCheckpoint(path, {"pass": 1}, every_s=0))  # a save after every batch
    handle.remove()
    ckpt = PassCheckpoint(kept, {"pass": 1})
    handle, calls = watch(model, lambda i: None)
    resumed = run(model, tok, ckpt)
    handle.remove()
    assert ckpt.resumed_from == 3 and len(calls) == num_batches(tok) - 3
    assert_identical(resumed, whole)


def test_a_requested_checkpoint_is_saved_at_the_next_batch_boundary(tiny, tmp_path):
    model, tok = tiny
    path, kept = tmp_path / "pass.safetensors", tmp_path / "kept.safetensors"

    def on_batch(i):
        if i == 3:
            request_checkpoint()  # what the SIGTERM handler does
        if i == 6:
            shutil.copy(path, kept)
            raise Stop

    handle, _ = watch(model, on_batch)
    with pytest.raises(Stop):
        run(model, tok, PassCheckpoint(path, {"pass": 1}, every_s=1e9))
    handle.remove()
    ckpt = PassCheckpoint(kept, {"pass": 1})
    assert ckpt.load(None, num_batches(tok)).batches_done == 3  # saved right after batch 3, not later


@pytest.mark.parametrize("damage", ["truncated", "foreign", "garbage"])
def test_a_damaged_or_foreign_checkpoint_is_a_miss(tiny, tmp_path, caplog, damage):
    model, tok = tiny
    whole = run(model, tok)
    path = tmp_path / "pass.safetensors"
    handle, _ = watch(model, interrupt_at(5))
    with pytest.raises(Stop):
        run(model, tok, PassCheckpoint(path, {"pass": 1}))
    handle.remove()
    identity = {"pass": 1}
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif damage == "garbage":
        path.write_bytes(b"not a checkpoint")
    else:
        identity = {"pass": 2}  # another pass's file (other keys or batch size) is never used
    ckpt = PassCheckpoint(path, identity)
    handle, calls = watch(model, lambda i: None)
    with caplog.at_level(logging.WARNING, logger="mathneuro"):
        again = run(model, tok, ckpt)
    handle.remove()
    assert ckpt.resumed_from == 0 and len(calls) == num_batches(tok)
    assert "starting the pass over" in caplog.text
    assert_identical(again, whole)


def test_the_cache_resumes_a_cut_pass_records_it_and_then_drops_the_checkpoint(tiny, tmp_path):
    model, tok = tiny
    identity = {"model": "tiny-llama"}

    def cached(cache, sources=None, resumed=None):
        return cached_statistics(cache, model, tok, TEXTS, model_identity=identity, kinds=KINDS, max_length=64,
                                 batch_size=BATCH, progress=False, sources=sources, resumed=resumed)

    whole, _ = cached(StatisticsCache(tmp_path / "reference"))
    cache = StatisticsCache(tmp_path / "cache")
    handle, _ = watch(model, interrupt_at(6))
    with pytest.raises(Stop):
        cached(cache)
    handle.remove()
    partial = list((tmp_path / "cache" / "partial").glob("*.safetensors"))
    assert len(partial) == 1  # one pass computes both kinds: one checkpoint
    assert not list((tmp_path / "cache").glob("*.json"))  # and no entry: nothing partial is a cache entry
    assert not list((tmp_path / "cache" / "locks").glob("*.lock"))  # its locks were released
    sources, resumed = {}, {}
    handle, calls = watch(model, lambda i: None)
    stats, keys = cached(StatisticsCache(tmp_path / "cache"), sources, resumed)
    handle.remove()
    assert sources == {"linear_inputs": "computed", "activation_counts": "computed"}
    assert resumed == {"linear_inputs": 5, "activation_counts": 5} and len(calls) == num_batches(tok) - 5
    assert_identical(stats, whole)
    assert not partial[0].exists()  # the entries are stored: the checkpoint is gone
    assert len(list((tmp_path / "cache").glob("*.safetensors"))) == 2


def test_sigterm_requests_a_checkpoint_and_still_reaches_the_handler_installed_before():
    calls = []
    before = signal.signal(signal.SIGTERM, lambda signum, frame: calls.append(signum))  # as submitit's bypass
    try:
        checkpoint_on_sigterm()
        checkpoint_on_sigterm()  # a second point in the same job: installed once
        assert not checkpoint_requested()
        os.kill(os.getpid(), signal.SIGTERM)
        assert checkpoint_requested() and not checkpoint_requested()  # one request, consumed once
        assert calls == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, before)


def test_half_written_files_a_killed_attempt_left_go_once_the_entries_are_stored(tiny, tmp_path):
    """SIGKILL mid-write leaves atomic_write's temp file (the cleanup never runs); the holder of the pass's
    locks removes those of its checkpoint and of its entries once they are stored."""
    model, tok = tiny
    cache = StatisticsCache(tmp_path / "cache")
    found, keys = cached_statistics(cache, model, tok, TEXTS[:8], model_identity={"model": "tiny"}, kinds=KINDS,
                                    max_length=64, batch_size=BATCH, progress=False)
    checkpoint = cache.checkpoint(list(keys.values()), BATCH)
    orphans = [checkpoint.path.parent / f".{checkpoint.path.name}.k9x.tmp",
               *(tmp_path / "cache" / f".{keys[k]}.{ext}.k9x.tmp" for k in KINDS for ext in ("safetensors", "json"))]
    bystander = tmp_path / "cache" / ".another-entry.safetensors.k9x.tmp"  # not these entries': kept
    for path in [*orphans, bystander]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"half")
    checkpoint.clear()
    for kind in KINDS:
        cache.save(keys[kind], found[kind])
    assert [p for p in orphans if p.exists()] == [] and bystander.exists()


def test_a_later_run_that_reads_the_stored_entries_clears_the_checkpoints_their_killed_pass_left(tiny, tmp_path):
    """Killed after storing its entries but before deleting its checkpoint (and, an attempt earlier, in the
    middle of a checkpoint write): the next run reads the entries, runs no pass, and still clears both, for
    the pass of both kinds and for a pass of one; another pass's checkpoint stays."""
    model, tok = tiny
    cache = StatisticsCache(tmp_path / "cache")

    def cached(cache, sources=None):
        return cached_statistics(cache, model, tok, TEXTS[:8], model_identity={"model": "tiny"}, kinds=KINDS,
                                 max_length=64, batch_size=BATCH, progress=False, sources=sources)

    _, keys = cached(cache)
    left = []
    for subset in ([keys[k] for k in KINDS], [keys["activation_counts"]]):
        checkpoint = cache.checkpoint(subset, BATCH)
        left += [checkpoint.path, checkpoint.path.parent / f".{checkpoint.path.name}.k9x4a1b2.tmp"]
    other = cache.checkpoint(["an-entry-not-stored"], BATCH).path
    other.parent.mkdir(parents=True, exist_ok=True)
    for path in [*left, other]:
        path.write_bytes(b"checkpoint")
    sources = {}
    cached(StatisticsCache(tmp_path / "cache"), sources)
    assert set(sources.values()) == {"disk"}
    assert [p for p in left if p.exists()] == [] and other.exists()
