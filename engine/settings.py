"""Settings declared once: a config dataclass field that the server exposes carries its command-line flag, its
environment variable, its help text, its parser and its choices in the field's metadata.

``setting(default, help=...)`` declares such a field; ``declared(cls)`` lists a dataclass's settings with every
name worked out; ``borrow(cls, name)`` copies an engine field's declaration onto a server field, so that the
engine's knobs the server passes through are declared once, on the engine's own dataclass. The server turns the
declarations into its argument parser, its environment fallbacks and docs/configuration.md (``app.settings``).

Names a declaration leaves out follow from the field: field ``max_file_jobs`` is flag ``--max-file-jobs`` and
environment variable ``LIVE_CAPTIONS_MAX_FILE_JOBS``; a boolean field that defaults to True is switched off by
``--no-<name>``; a repeatable setting (a tuple default) reads a comma-separated list from the plural variable
(``--asr-url``, ``LIVE_CAPTIONS_ASR_URLS``).

Standard library only: ``engine.config``, the ground floor of the engine, declares its settings with it.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

ENV_PREFIX = "LIVE_CAPTIONS_"
_KEY = "live_captions.setting"  # the field metadata key that holds a Setting

_T = TypeVar("_T")
_E = TypeVar("_E", bound=StrEnum)

# Words an environment variable may use for a boolean, either case.
_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")


@dataclass(frozen=True)
class Setting:
    """How one field is set from outside the program.

    ``help``: what it does, for ``--help`` and the docs (plain text: no ``%`` escaping).
    ``flag``: the command-line flag (``--name``); None: from the field (see the module docstring).
    ``env``: environment variables read when the flag is absent, first set one wins; empty: from the flag.
    ``parse``: text to value (one item of a repeatable setting); raises ``ValueError`` or
    ``argparse.ArgumentTypeError``. None: the type of the default (``str`` for a None default).
    ``choices``: the values it accepts (after ``parse``), or None for any.
    ``metavar``: how ``--help`` names the value; None: argparse's own.
    ``default_text``: how ``--help`` and the docs show the default, where the value alone says too little.
    ``flag_default``: the value when neither flag nor environment gives one, where it is not the field's default
    (e.g. the transcript store: a file for the server, memory for a config built in code); called once per parse.
    ``owner``: the dataclass that declares it (the docs group settings by it); set by ``declared`` and ``borrow``.
    """

    help: str
    flag: str | None = None
    env: tuple[str, ...] = ()
    parse: Callable[[str], Any] | None = None
    choices: tuple[Any, ...] | None = None
    metavar: str | None = None
    default_text: str | None = None
    flag_default: Callable[[], Any] | None = None
    owner: type | None = None


@dataclass(frozen=True)
class Declared:
    """One field's setting with every name worked out."""

    name: str  # the field's name in the dataclass being read
    default: Any  # the field's default
    setting: Setting  # flag, env and owner filled in

    @property
    def flag(self) -> str:
        assert self.setting.flag is not None  # declared() fills it in
        return self.setting.flag

    @property
    def dest(self) -> str:
        """The attribute of the parsed arguments: the flag's name (``--no-speakers`` -> ``no_speakers``)."""
        return self.flag.removeprefix("--").replace("-", "_")

    @property
    def switch(self) -> bool:
        """A flag without a value: it sets the field to the opposite of its default."""
        return isinstance(self.default, bool)

    @property
    def repeatable(self) -> bool:
        """A flag given once per item (the field holds a tuple); the environment gives a comma-separated list."""
        return isinstance(self.default, tuple)

    @property
    def parse(self) -> Callable[[str], Any] | None:
        """The declared parser, else ``int`` or ``float`` after the default's type, else None (the text as is)."""
        if self.setting.parse is not None:
            return self.setting.parse
        kind = type(self.default)
        return kind if kind in (int, float) else None

    def parse_one(self, text: str) -> Any:
        """``text`` (one item of a repeatable setting) as a value; raises ``ValueError``/``ArgumentTypeError``."""
        return text if self.parse is None else self.parse(text)

    def show_default(self) -> str:
        """The default as ``--help`` and the docs show it."""
        if self.setting.default_text is not None:
            return self.setting.default_text
        value = self.default
        if self.switch:
            return "off"
        if value is None or value == ():
            return "none"
        if isinstance(value, tuple):
            return ",".join(str(v) for v in value)
        return f"{value:g}" if isinstance(value, float) else str(value)

    def from_env(self, text: str, name: str) -> Any:
        """The flag's value from environment variable ``name`` holding ``text``: True/False for a switch (flag
        given or not), a list for a repeatable setting. Raises ``ValueError`` whose message starts with ``name``."""
        if self.switch:
            return parse_bool(text, name)
        try:
            if self.repeatable:
                values = [self.parse_one(item.strip()) for item in text.split(",") if item.strip()]
            else:
                values = [self.parse_one(text)]
        except (ValueError, argparse.ArgumentTypeError) as exc:
            # int("x") says "invalid literal for int() with base 10"; a declared parser says what it expects
            plain = self.parse in (int, float)
            raise ValueError(f"{name}: " + (f"expected a number, got {text!r}" if plain else str(exc))) from None
        choices = self.setting.choices
        for value in values:
            if choices is not None and value not in choices:
                raise ValueError(f"{name}: expected one of {', '.join(map(str, choices))}, got {value!r}")
        return values if self.repeatable else values[0]


def parse_bool(text: str, name: str) -> bool:
    """true/false, 1/0, yes/no, on/off in any case; anything else raises ``ValueError`` naming ``name``."""
    word = text.strip().lower()
    if word in _TRUE or word in _FALSE:
        return word in _TRUE
    raise ValueError(f"{name}: expected true/false, 1/0, yes/no or on/off, got {text!r}")


def member_of(kind: type[_E]) -> Callable[[str], _E | str]:
    """The parser of a setting whose values are ``kind``'s: the member a text names, or the text as it is when it
    names none (the setting's ``choices``, ``values_of(kind)``, then refuse it with the usual message)."""

    def parse(text: str) -> _E | str:
        try:
            return kind(text)
        except ValueError:
            return text

    parse.__name__ = kind.__name__
    return parse


def values_of(kind: type[StrEnum]) -> tuple[str, ...]:
    """The values of ``kind``'s members, in their order: a setting's ``choices`` as flags, help and docs spell them."""
    return tuple(member.value for member in kind)


def setting(
    default: _T,
    *,
    help: str,
    flag: str | None = None,
    env: Sequence[str] = (),
    parse: Callable[[str], Any] | None = None,
    choices: Sequence[Any] | None = None,
    metavar: str | None = None,
    default_text: str | None = None,
    flag_default: Callable[[], Any] | None = None,
) -> _T:
    """A dataclass field with ``default`` that is a setting (see ``Setting`` for the rest)."""
    declaration = Setting(
        help=help,
        flag=flag,
        env=tuple(env),
        parse=parse,
        choices=None if choices is None else tuple(choices),
        metavar=metavar,
        default_text=default_text,
        flag_default=flag_default,
    )
    return dataclasses.field(default=default, metadata={_KEY: declaration})


def borrow(cls: type, name: str, **changes: Any) -> Any:
    """A field with the default and the declaration of setting ``name`` of dataclass ``cls``, for a dataclass
    that passes it through (the server's flat config). ``changes`` replace parts of the declaration the owner
    cannot know (e.g. choices that live in a layer above it)."""
    (found,) = (d for d in declared(cls) if d.name == name)
    return dataclasses.field(default=found.default, metadata={_KEY: dataclasses.replace(found.setting, **changes)})


def declared(cls: type, *, deep: bool = False) -> list[Declared]:
    """The settings among ``cls``'s fields, in field order, with flags, environment names and owners filled in;
    ``deep``: with those of the dataclasses it holds (``nested``) in their field's place."""
    inner = dict(nested(cls)) if deep else {}
    found: list[Declared] = []
    for f in dataclasses.fields(cls):
        s = f.metadata.get(_KEY)
        if f.name in inner:
            found += declared(inner[f.name], deep=True)
        if not isinstance(s, Setting):
            continue
        default = f.default if f.default is not dataclasses.MISSING else None
        flag = s.flag or "--" + ("no-" if default is True else "") + f.name.replace("_", "-")
        env = s.env or (
            ENV_PREFIX
            + flag.removeprefix("--").replace("-", "_").upper()
            + ("S" if isinstance(default, tuple) else ""),
        )
        found.append(Declared(f.name, default, dataclasses.replace(s, flag=flag, env=env, owner=s.owner or cls)))
    return found


def nested(cls: type) -> list[tuple[str, type]]:
    """The fields of ``cls`` that hold a dataclass with settings of its own (``ServerConfig.ice``): name, class."""
    found: list[tuple[str, type]] = []
    for f in dataclasses.fields(cls):
        factory = f.default_factory
        if isinstance(factory, type) and dataclasses.is_dataclass(factory) and declared(factory):
            found.append((f.name, factory))
    return found


def add_flags(parser: argparse.ArgumentParser, cls: type, *names: str, **changes: Any) -> None:
    """Flags without environment fallbacks (``python -m engine``) for settings ``names`` of dataclass ``cls``, each
    with its declared help, default, parser and choices; ``changes`` replace parts of each one's declaration."""
    for name in names:
        (found,) = (d for d in declared(cls) if d.name == name)
        d = dataclasses.replace(found, setting=dataclasses.replace(found.setting, **changes))
        options: dict[str, Any] = {
            "dest": d.dest,
            "help": f"{d.setting.help} (default: {d.show_default()})".replace("%", "%%"),
        }
        if d.switch:
            parser.add_argument(d.flag, action="store_true", **options)
            continue
        for key, value in (("type", d.parse), ("choices", d.setting.choices), ("metavar", d.setting.metavar)):
            if value is not None:
                options[key] = value
        if d.repeatable:
            parser.add_argument(d.flag, action="append", default=[], **options)
        else:
            parser.add_argument(d.flag, default=d.default, **options)
