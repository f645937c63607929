"""The engine's small exception taxonomy. Library errors are mapped to these at the engine's boundary."""

from __future__ import annotations


class EngineError(Exception):
    """Base class of every error the engine raises on purpose."""


class ModelError(EngineError, ValueError):
    """A model name, folder or packaged checkpoint cannot be used (missing, unknown or broken)."""


class EngineNotReady(EngineError):
    """The recognizer is not (or no longer) able to take requests; ``state`` names where it stands."""

    def __init__(self, state: str, detail: str = "") -> None:
        self.state = state
        super().__init__(f"engine is {state}" + (f": {detail}" if detail else ""))


class IllegalTransition(EngineError, RuntimeError):
    """A lifecycle method was called in a state that does not allow it."""

    def __init__(self, what: str, state: object) -> None:
        super().__init__(f"cannot {what} in state {getattr(state, 'name', state)}")


class BadAudio(EngineError, ValueError):
    """Audio handed to a session has the wrong shape, type or rate."""
