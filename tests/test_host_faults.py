"""Which failures take a host out of a fanned-out run and which fail the run (mai/host_faults.py; the runs over real
bad hosts are in tests/test_cluster.py), and the code version a drain compares with its plan's."""

from __future__ import annotations

import errno

import pytest
import torch

from mai.code_version import SOURCE, code_difference, code_versions
from mai.errors import ConfigError, ModelLoadError
from mai.host_faults import host_fault


def _raised(error: BaseException, then: Exception | None = None) -> BaseException:
    """`error` as raised, or `then` raised while handling it (a wrapper a library adds on the way up)."""
    try:
        try:
            raise error
        except BaseException as inner:
            if then is None:
                raise
            raise then from inner
    except BaseException as raised:  # noqa: BLE001  (returned: the test looks at it)
        return raised


@pytest.mark.parametrize(("error", "says"), [
    (OSError(errno.EROFS, "Read-only file system", "/mnt/store/runs/x"), "mount it read-write"),
    (PermissionError(errno.EACCES, "Permission denied", "/mnt/store/runs/x"), "may not write the store here"),
    (OSError(errno.ENOSPC, "No space left on device", "/mnt/store/runs/x"), "is full: free space there"),
    (OSError(errno.EDQUOT, "Disk quota exceeded", "/mnt/store/runs/x"), "over its disk quota"),
    (ModuleNotFoundError("No module named 'pyarrow'"), "install mai and its packages there"),
    (ModelLoadError("model mai-tiny-small failed to load on host gpu-07 (OSError: ...)"), "failed to load on host"),
    (torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), "its GPU ran out of memory"),
    (ConfigError("store 3f0c is not at /data/mai: set MAI_HOME on this worker"), "set MAI_HOME"),
])
def test_a_hosts_fault_is_named_in_one_line_with_its_fix(error: Exception, says: str) -> None:
    for raised in (_raised(error), _raised(error, RuntimeError("the shard's task failed"))):  # as is, or wrapped
        fault = host_fault(raised)
        assert fault is not None and says in fault and "\n" not in fault, fault


@pytest.mark.parametrize("error", [ValueError("a bad benchmark row"), KeyError("stage"),
                                   OSError(errno.ENOENT, "No such file or directory", "/x"), ZeroDivisionError()])
def test_a_failure_that_would_fail_on_every_host_is_not_the_hosts(error: Exception) -> None:
    assert host_fault(_raised(error)) is None


def test_a_host_running_other_code_than_the_plan_is_told_what_differs() -> None:
    here = code_versions()
    assert here["mai"] != "missing" and here[SOURCE].startswith("sha256:") and "torch" in here
    assert code_difference(here) is None and code_difference({}) is None  # a plan from before: nothing to compare
    assert code_difference({**here, "mai": "0.0.1"}) == f"mai {here['mai']} here, 0.0.1 planned"
    assert code_difference({**here, SOURCE: "sha256:0"}) == f"{SOURCE} {here[SOURCE]} here, sha256:0 planned"
