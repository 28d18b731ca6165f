"""The task both agent examples get stuck on, and the scripted "LLM" that gets stuck on it.

The task: ``word_count`` miscounts words separated by two spaces. The scripted policy stands in
for an LLM, so the examples need no API key and run the same every time. It reads the conversation
as an LLM would: convinced the failure comes from a stale bytecode cache, it re-runs the failing
test in ever new wordings (clear ``__pycache__``, delete ``*.pyc``, ``python3 -B``, a clean
environment) and shrugs off warnings. Only a strategy-pivot directive in the messages since its
last turn makes it start over from the requirement and read the code, where the bug is. A
``stubborn`` policy ignores the directive too.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Tuple

TASK = (
    "word_count() in textstats.py returns the wrong number of words when words are separated by "
    "more than one space. Make `python3 test_textstats.py` pass."
)

SOURCE = '''def word_count(text):
    """Number of words in text, however they are spaced."""
    return len(text.split(" "))
'''

TEST = """from textstats import word_count

assert word_count("one two three") == 3
assert word_count("one  two") == 2, word_count("one  two")
assert word_count("  padded   words  ") == 2
print("all tests passed")
"""

SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"

# The stuck plan: one wrong theory (a stale cache), the same failing step in new words each time.
STUCK = [
    ("Let me run the test to see how it fails.", "python3 test_textstats.py"),
    (
        "The assertion still fails although the code looks right, so Python may be loading a "
        "stale compiled module. I'll clear __pycache__ and run the test again.",
        "rm -rf __pycache__ && python3 test_textstats.py",
    ),
    (
        "Still failing. There may be stale .pyc files elsewhere in the tree; delete them all and "
        "re-run the test.",
        "find . -name '*.pyc' -delete && python3 test_textstats.py",
    ),
    (
        "To rule out bytecode caching completely, run the interpreter with -B so it neither "
        "writes nor reads .pyc files.",
        "python3 -B test_textstats.py",
    ),
    (
        "Perhaps an environment variable interferes. Run the test with bytecode writing disabled "
        "through the environment as well.",
        "PYTHONDONTWRITEBYTECODE=1 python3 -B ./test_textstats.py",
    ),
    (
        "Try a completely clean environment for the interpreter.",
        'env -i PATH="$PATH" python3 -B test_textstats.py',
    ),
    (
        "Maybe the module is imported from somewhere else. Run it with an explicit path.",
        "PYTHONPATH=. python3 -B test_textstats.py",
    ),
]

# After a pivot: re-read the requirement, read the code, fix the cause, verify, submit.
FIX = "sed -i 's/text.split(\" \")/text.split()/' textstats.py && python3 test_textstats.py"
PIVOTED = [
    (
        "Starting over from the requirement: words may be separated by any run of spaces. "
        "Instead of re-running the test, read the implementation.",
        "cat textstats.py",
    ),
    (
        'text.split(" ") yields an empty string between two spaces, so doubled spaces count '
        "as extra words. split() without an argument splits on runs of whitespace and drops the "
        "ends. Fix it and run the test.",
        FIX,
    ),
    ("The test passes. Submitting.", SUBMIT),
]

#: What the scripted policy recognises in loopguard's pivot directive.
DIRECTIVE = "STRATEGY PIVOT REQUIRED"


def make_workspace(root: Optional[Path] = None) -> Path:
    ws = Path(root or tempfile.mkdtemp(prefix="wordcount-"))
    (ws / "textstats.py").write_text(SOURCE)
    (ws / "test_textstats.py").write_text(TEST)
    return ws


class ScriptedPolicy:
    """Picks the next (thought, command) from the messages the model is shown this turn."""

    def __init__(self, stubborn: bool = False) -> None:
        self.stubborn = stubborn
        self.turns = 0
        #: The turn (1-based) on which the policy read a directive and changed its plan.
        self.pivoted_at: Optional[int] = None
        self._stuck = 0
        self._pivoted = 0

    def next(self, new_messages: Iterable[Mapping[str, Any]]) -> Tuple[str, str]:
        self.turns += 1
        told_to_pivot = any(DIRECTIVE in str(m.get("content", "")) for m in new_messages)
        if told_to_pivot and not self.stubborn and self.pivoted_at is None:
            self.pivoted_at = self.turns
        if self.pivoted_at is not None and self._pivoted < len(PIVOTED):
            self._pivoted += 1
            return PIVOTED[self._pivoted - 1]
        self._stuck += 1
        return STUCK[min(self._stuck, len(STUCK)) - 1]
