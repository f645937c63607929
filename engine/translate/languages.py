"""Language tags as translation uses them: BCP 47, checked and normalised, and their English names.

A room keeps a language tag as it was given, normalised (``normalise_language``: ``"ES_mx"`` -> ``"es-MX"``).
Engines translate by the primary subtag (``primary``: ``es-MX`` is Spanish, ``es``), except where one has a mode for
the whole tag (Apertium's ``es-pt_BR`` serves ``pt-BR``; ``engine.translate.apertium``).

Only the common shape of a tag is accepted: a 2- or 3-letter language, then subtags of 2 to 8 letters or digits
(script, region, variant). Private-use and extension subtags (``x-...``, ``u-...``: one-letter singletons), the
grandfathered tags (``i-klingon``) and 4- to 8-letter primary subtags are refused: no engine here translates them,
and a refusal says so at once rather than failing at the first sentence.
"""

from __future__ import annotations

import re

from engine.protocol import LANGUAGES as WHISPER_LANGUAGES

MAX_TAG_CHARS = 35  # RFC 5646 section 4.4.1: 35 characters hold any tag worth keeping
_TAG = re.compile(r"^[a-z]{2,3}(?:-[a-z0-9]{2,8})*$")

# English names, for prompts (a chat model reads "Spanish" more reliably than "es"): Whisper's languages, and those
# an engine here produces that Whisper lacks.
NAMES: dict[str, str] = {
    **{code: name.title() for code, name in WHISPER_LANGUAGES.items()},
    "eo": "Esperanto",
    "an": "Aragonese",
    "ast": "Asturian",
}


def normalise_language(code: str) -> str:
    """``code`` as a normalised BCP 47 tag: language lower case, script title case, region upper case, ``_`` read
    as ``-`` (``"pt_br"`` -> ``"pt-BR"``, ``"ZH-hant-tw"`` -> ``"zh-Hant-TW"``). Raises ``ValueError`` for
    anything else (see the module for what is accepted)."""
    if not isinstance(code, str):
        raise ValueError(f"not a language tag: {code!r}")
    tag = code.strip().replace("_", "-").lower()
    if len(tag) > MAX_TAG_CHARS or not _TAG.match(tag):
        raise ValueError(f"not a language tag: {code[:40]!r}")
    language, *rest = tag.split("-")
    return "-".join([language, *(_case(subtag) for subtag in rest)])


def _case(subtag: str) -> str:
    """RFC 5646's conventional case: regions upper (``BR``, ``419`` as is), scripts title (``Hant``), variants
    lower (``valencia``)."""
    if len(subtag) == 2:
        return subtag.upper()
    if len(subtag) == 4 and subtag.isalpha():
        return subtag.title()
    return subtag


def primary(tag: str) -> str:
    """The language of a tag (``"pt-BR"`` -> ``"pt"``), lower case: what engines translate by."""
    return tag.split("-", 1)[0].split("_", 1)[0].lower()


def language_name(tag: str) -> str:
    """The English name of a tag's language (``"pt-BR"`` -> ``"Portuguese (BR)"``), else the tag itself."""
    name = NAMES.get(primary(tag))
    if name is None:
        return tag
    rest = tag.split("-", 1)[1] if "-" in tag else ""
    return f"{name} ({rest})" if rest else name
