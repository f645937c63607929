"""The server's command line, its environment fallbacks and docs/configuration.md, generated from the settings its
config dataclasses declare (``engine.settings``).

A flag given on the command line wins; else its environment variable, read when the arguments are parsed; else
its default. A bad environment value is refused like a bad flag (usage, the message naming the variable, exit
status 2), and only when the flag is absent: a flag given overrides whatever the environment holds.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TypeVar

from engine import Declared, declared, nested

_C = TypeVar("_C")
_UNSET: Any = object()  # a flag's value until the parse fills it from the environment or the default


class SettingsError(SystemExit):
    """A flag or environment value the server cannot take: exit status 2, as for any bad flag, and the message
    (``LIVE_CAPTIONS_ASR_URLS: recognizer URL ...``) as the exception's text."""

    def __init__(self, message: str) -> None:
        super().__init__(2)
        self.message = message

    def __str__(self) -> str:
        return self.message


class SettingsParser(argparse.ArgumentParser):
    """An argument parser with one flag per setting of ``config`` (and of the dataclasses it holds), in field
    order, each with its help text, default and environment variable. A flag's value in the parsed arguments is
    what the command line says: a switch (``--no-speakers``) is True when given, a repeatable flag is a list."""

    def __init__(self, config: type, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.settings = declared(config, deep=True)
        for d in self.settings:
            _add_flag(self, d)

    def parse_known_args(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        namespace: argparse.Namespace | None = None,
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, rest = super().parse_known_args(args, namespace)
        for d in self.settings:
            if getattr(parsed, d.dest) is (None if d.repeatable else _UNSET):
                setattr(parsed, d.dest, self._fallback(d))
        return parsed, rest

    def _fallback(self, d: Declared) -> Any:
        """The value of a flag the command line left out: its environment variable's, else its default."""
        for name in d.setting.env:
            text = os.environ.get(name, "")
            if text:  # empty counts as unset
                try:
                    return d.from_env(text, name)
                except ValueError as exc:
                    self.error(str(exc))
        if d.switch:
            return False
        if d.setting.flag_default is not None:
            return d.setting.flag_default()
        return list(d.default) if d.repeatable else d.default

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SettingsError(message)


def _add_flag(parser: argparse.ArgumentParser, d: Declared) -> None:
    repeat = "repeatable; " if d.repeatable else ""
    help_text = f"{d.setting.help} ({repeat}default: {d.show_default()}; env {' or '.join(d.setting.env)})"
    options: dict[str, Any] = {"dest": d.dest, "help": help_text.replace("%", "%%")}
    if d.setting.metavar is not None:
        options["metavar"] = d.setting.metavar
    if d.switch:
        parser.add_argument(d.flag, action="store_const", const=True, default=_UNSET, **options)
        return
    if d.parse is not None:
        options["type"] = d.parse
    if d.setting.choices is not None:
        options["choices"] = d.setting.choices
    if d.repeatable:
        parser.add_argument(d.flag, action="append", default=None, **options)
    else:
        parser.add_argument(d.flag, default=_UNSET, **options)


def config_from(cls: Callable[..., _C], args: argparse.Namespace, **fixed: Any) -> _C:
    """An instance of dataclass ``cls`` from parsed arguments (``SettingsParser(cls)``), its nested configs too;
    ``fixed`` sets fields that are no settings. The dataclass's own checks raise ``ValueError`` as usual."""
    values: dict[str, Any] = dict(fixed)
    for d in declared(_as_type(cls)):
        value = getattr(args, d.dest)
        if d.switch:
            value = not d.default if value else d.default
        elif d.repeatable:
            value = tuple(dict.fromkeys(value))  # in order, each once
        values[d.name] = value
    for name, inner in nested(_as_type(cls)):
        values[name] = config_from(inner, args)
    return cls(**values)


def _as_type(cls: Callable[..., Any]) -> type:
    assert isinstance(cls, type) and dataclasses.is_dataclass(cls)
    return cls


def markdown(config: type, title: str, intro: str) -> str:
    """docs/configuration.md: every setting of ``config`` in a table per dataclass that declares it (flag,
    environment variable, default, help), under ``title`` and ``intro`` (Markdown)."""
    groups: dict[type, list[Declared]] = {}
    for d in declared(config, deep=True):
        assert d.setting.owner is not None
        groups.setdefault(d.setting.owner, []).append(d)
    lines = [f"# {title}", "", intro]
    for owner, items in groups.items():
        lines += [
            "",
            f"## {owner.__name__}",
            "",
            f"{_summary(owner)} Declared in `{owner.__module__}`.",
            "",
            "| Flag | Environment | Default | What it does |",
            "| --- | --- | --- | --- |",
        ]
        for d in items:
            value = "" if d.switch else f" {d.setting.metavar or d.dest.upper()}"
            env = " or ".join(f"`{name}`" for name in d.setting.env)
            # a value in code type, a description of one (``default_text``) as prose
            default = _cell(d.setting.default_text) if d.setting.default_text else f"`{d.show_default()}`"
            more = "" if d.setting.choices is None else " One of " + ", ".join(f"`{c}`" for c in d.setting.choices)
            more += "." if more else ""
            more += " Repeatable (the variable: a comma-separated list)." if d.repeatable else ""
            lines.append(f"| `{d.flag}{value}` | {env} | {default} | {_cell(_sentence(d.setting.help))}{more} |")
    return "\n".join(lines) + "\n"


def _summary(cls: type) -> str:
    """The first paragraph of ``cls``'s docstring on one line, reStructuredText literals as Markdown ones."""
    paragraph = (cls.__doc__ or "").strip().split("\n\n")[0]
    return re.sub(r"``(.+?)``", r"`\1`", " ".join(line.strip() for line in paragraph.splitlines()))


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def _cell(text: str) -> str:
    """``text`` safe in a Markdown table cell: no column breaks, no HTML tags, no emphasis."""
    return text.replace("|", "\\|").replace("<", "&lt;").replace("*", "\\*")
