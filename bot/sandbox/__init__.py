"""The OS sandbox every `bash` call runs in: a policy, the bwrap profile it becomes, a runner."""

from bot.sandbox.environment import minimal_environment
from bot.sandbox.identity import run_as
from bot.sandbox.policy import (
    GIT_STATE_NAMES,
    PROTECTED_NAMES,
    SandboxPolicy,
    sqlite_companions,
)
from bot.sandbox.profile import SANDBOX_HOME, Profile, build_profile
from bot.sandbox.runner import Sandbox, find_bwrap, find_prlimit

__all__ = [
    "GIT_STATE_NAMES",
    "PROTECTED_NAMES",
    "SANDBOX_HOME",
    "Profile",
    "Sandbox",
    "SandboxPolicy",
    "build_profile",
    "find_bwrap",
    "find_prlimit",
    "minimal_environment",
    "run_as",
    "sqlite_companions",
]
