"""The framework's own writes are named when they fail (mathneuro.cli.framework_io)."""

from __future__ import annotations

import errno
import logging
from pathlib import Path

import pytest

from mathneuro.cli.errors import framework_write_error
from mathneuro.cli.framework_io import guard_log_files, last_written, named, track_writes


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full to stand for a full disk")
def test_a_log_file_the_disk_refuses_raises_once_naming_it() -> None:
    logger = logging.getLogger("mathneuro-test-full-log")
    logger.propagate = False
    handler = logging.FileHandler("/dev/full")
    logger.addHandler(handler)
    try:
        guard_log_files(logger)
        with pytest.raises(OSError) as info:
            logger.warning("a line the disk refuses")
        assert (info.value.filename, info.value.errno) == ("/dev/full", errno.ENOSPC)
        assert handler not in logger.handlers
        logger.warning("the next line goes nowhere, without a second error")
    finally:
        logger.removeHandler(handler)
        handler.close()


def test_an_error_without_a_file_name_is_named_by_the_last_file_written(tmp_path: Path) -> None:
    track_writes()
    (tmp_path / "read.txt").write_text("x")
    target = tmp_path / "snapshot.yaml"
    with open(target, "w", encoding="utf-8") as fh:
        fh.write("a: 1\n")
    (tmp_path / "read.txt").read_text()  # reading names nothing
    assert last_written() == str(target)
    exc = named(OSError(errno.ENOSPC, "No space left on device"))
    assert exc.filename == str(target) and exc.errno == errno.ENOSPC
    line = framework_write_error(exc)
    assert line == (f"hydra.run.dir: cannot write '{target}': the disk is full (No space left on device); "
                    "free space there or give another directory (hydra.run.dir=...)")
    assert framework_write_error(OSError(errno.EROFS, "Read-only file system", "/x"), multirun=True) == \
        ("hydra.sweep.dir: cannot write '/x': the file system is read-only (Read-only file system); "
         "give a writable directory (hydra.sweep.dir=...)")
