"""Does a decoded text end a sentence? The signal that lets a sentence lock after a short pause.

The endpointer's silence schedule waits long (2 s for a short sentence) because a pause alone does not say whether
the speaker has finished: people pause inside sentences to breathe or think. The text decoded during the pause
does say so, most of the time: Whisper punctuates what it hears, and a speaker who stops mid-clause leaves a
trailing comma, a conjunction, an article or a filler. ``ends_sentence`` reads that; the session locks a sentence
whose closing decode ends one after ``EndpointConfig.sentence_pause_ms`` of silence (``engine.stream.session``).

The rule is deliberately conservative: a false "yes" splits a sentence in two (both parts still lock with the
right words, but the reader sees a break that was not there); a false "no" only costs the schedule's longer wait.
"""

from __future__ import annotations

import re

# Sentence-final punctuation, Latin and CJK. An ellipsis is not one: Whisper writes it where speech trails off.
_FINAL = frozenset(".?!。？！")
_CLOSERS = "\"'”’»)]」』"
_WORD = re.compile(r"[^\w']+")

# Words a finished English sentence hardly ever ends with: articles, conjunctions, possessives, fillers and
# abbreviations. Whisper writes "and." or "the." when the audio stops mid-clause.
_OPEN_ENDINGS = frozenset(
    """a an the and or but nor because although though unless my your his our their its very um uh er erm ah hmm mm
    mr mrs ms dr st prof vs""".split()
)
# Prepositions and subordinators that leave a statement open ("the results of."), though a question may end with
# them ("What are you afraid of?").
_OPEN_BEFORE_PERIOD = frozenset("of to with from into onto upon if than whose".split())


def ends_sentence(text: str) -> bool:
    """True when ``text`` (a decode of everything said so far in a segment) reads as a finished sentence: it ends with
    sentence-final punctuation (closing quotes and brackets aside), not with an ellipsis, and its last word is not
    one that leaves a clause open ("and.", "the.", "um.") or an abbreviation ("Dr.")."""
    t = text.rstrip().rstrip(_CLOSERS).rstrip()
    if not t or t[-1] not in _FINAL or t.endswith("..") or t.endswith("…"):
        return False
    words = _WORD.sub(" ", t.lower()).split()
    if not words:
        return False
    last = words[-1]
    if last in _OPEN_ENDINGS or (last in _OPEN_BEFORE_PERIOD and t[-1] in ".。"):
        return False
    # A single letter before the period is an initial ("John F."), not an ending; a number is an ending.
    return not (len(last) == 1 and last.isalpha() and last not in ("i",))
