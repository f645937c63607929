"""CEA-608's characters (line-21 captions: broadcast TV, SCC files, the captions OBS puts in its stream): which ones
a decoder shows, and what a caption sends in place of any other. ``app.transcripts.scc`` (SCC files) and
``app.outputs.obs`` (OBS's stream captions) shape their text with it.

``SHOWN``: ASCII but the backquote and the vertical bar (decoders disagree on them), with the letters and signs of
608's basic set (``á é í ó ú ç ÷ Ñ ñ``), its special set (``® ° ½ ¿ ™ ¢ £ ♪ à è â ê î ô û``) and its extended sets
(``Á É Ó Ú Ü ü ¡ © • « » À Â Ç È Ê Ë ë Î Ï ï Ô Ù ù Û Ã ã Í Ì ì Ò ò Õ õ Ä ä Ö ö ß ¥ Å å Ø ø``). ``shown_form``:
one character as sent, itself where 608 has it, else a close form, else nothing.
"""

from __future__ import annotations

import unicodedata

COLUMNS = 32  # characters a CEA-608 row holds

_NON_ASCII = frozenset(
    "áéíóúçÑñ÷"  # basic set (in place of * \ ^ _ ` { | } ~, which the extended sets carry)
    "®°½¿™¢£♪àèâêîôû"  # special set
    "ÁÉÓÚÜü¡©•«»ÀÂÇÈÊËëÎÏïÔÙùÛ"  # extended set, Spanish and French
    "ÃãÍÌìÒòÕõÄäÖößÅåØø¥"  # extended set, Portuguese, German and Danish
)
SHOWN = frozenset(chr(c) for c in range(0x20, 0x7F)) - {"`", "|"} | _NON_ASCII

# Close forms of characters 608 lacks (or has only in a form decoders disagree on).
_SUBSTITUTES = {
    "‘": "'",
    "’": "'",
    "‚": "'",
    "‛": "'",
    "′": "'",
    "´": "'",
    "`": "'",
    "“": '"',
    "”": '"',
    "„": '"',
    "‟": '"',
    "″": '"',
    "‐": "-",
    "‑": "-",
    "‒": "-",
    "–": "-",
    "—": "-",
    "―": "-",
    "−": "-",
    "…": "...",
    "·": ".",
    "×": "x",
    "|": "/",
    "€": "EUR",
    "♫": "♪",
    "♬": "♪",
    "œ": "oe",
    "Œ": "OE",
    "æ": "ae",
    "Æ": "AE",
    "ł": "l",
    "Ł": "L",
    "đ": "d",
    "Đ": "D",
    "ð": "d",
    "þ": "th",
    "Þ": "Th",
    "ı": "i",
}


def shown_form(ch: str) -> str:
    """The character ``ch`` as a 608 caption sends it (every character of it in ``SHOWN``): ``ch`` itself if 608
    has it; a space for whitespace; a close form (curly quotes and dashes to ASCII, ``æ`` -> ``ae``); else the
    letter without its accents (``ő`` -> ``o``, compatibility forms too: ``ﬁ`` -> ``fi``); else ``""`` (emoji,
    CJK)."""
    if ch in SHOWN:
        return ch
    if ch.isspace():
        return " "
    if ch in _SUBSTITUTES:
        return _SUBSTITUTES[ch]
    bare = "".join(c for c in unicodedata.normalize("NFKD", ch) if not unicodedata.combining(c))
    return bare if all(c in SHOWN for c in bare) else ""
