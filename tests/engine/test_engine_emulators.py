"""The engine tests written for S3 (moto), rerun on the emulated Azure store (Azurite).

The functions are the S3 modules' own; this module's ``s3_url_factory`` hands them
emulator locations instead (``emulator_url_factory`` in tests/conftest.py), so one
test body checks every store: the fencing race between real processes, crash
(SIGKILL) and reopen, and the writer's model-based test on a short budget.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import settings
from test_engine_kill import test_sigkill_loop_on_s3 as test_sigkill_loop_on_emulator
from test_engine_race import test_processes_race_to_open_on_s3 as test_processes_race_to_open_on_emulator
from test_engine_stateful import _SETTINGS, S3Machine


@pytest.fixture
def s3_url_factory(emulator_url_factory: Callable[[], Any]) -> Callable[[], Any]:
    return emulator_url_factory


class AzuriteMachine(S3Machine):
    """The S3 machine's store kind, on Azurite locations (``S3Machine.locations`` is set by
    ``_emulator_for_machine``)."""


# The model-based writer test on Azurite (a unittest class cannot take parametrized
# fixtures, so it names its emulator); a short budget: each request costs a few ms.
TestStatefulAzurite = pytest.mark.usefixtures("_emulator_for_machine")(
    pytest.mark.slow(AzuriteMachine.TestCase)
)
TestStatefulAzurite.settings = settings(_SETTINGS, max_examples=2)

__all__ = ["TestStatefulAzurite", "test_processes_race_to_open_on_emulator", "test_sigkill_loop_on_emulator"]
