"""`loopguard score --html` in a real browser: the page opens from disk with nothing else, shows
each run's events with their verdicts, highlights the loops, links a loop to what it repeats,
and filters to the flagged runs."""

from __future__ import annotations

import json
import re
import subprocess

from playwright.sync_api import expect

from conftest import ROOT, loopguard_bin


def test_the_report_shows_why_a_run_was_flagged(new_page, screenshots, tmp_path):
    report = tmp_path / "report.html"
    done = subprocess.run(
        [str(loopguard_bin()), "score", "tests/fixtures/runs.jsonl", "--html", str(report)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    scores = {s["id"]: s for s in map(json.loads, done.stdout.splitlines())}

    p = new_page(width=1280)
    page = p.page
    requests = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto(report.as_uri())

    rows = page.locator(".summary tbody tr")
    expect(rows).to_have_count(3)
    expect(rows.filter(has_text="reworded-failure-loop")).to_contain_text("loop")
    expect(rows.filter(has_text="paging-is-progress")).to_contain_text("no loop")

    # The flagged run is open; its first loop is the event `first_loop_index` names.
    flagged = page.locator("section.run#r1")
    expect(flagged.locator("> details")).to_have_attribute("open", "")
    first = scores["reworded-failure-loop"]["first_loop_index"]
    loop_row = page.locator(f"#r1-e{first}")
    expect(loop_row).to_have_class(re.compile(r"\bloop\b.*\bfirst\b"))
    expect(loop_row.locator(".verdict")).to_contain_text("semantic repeat")
    expect(loop_row.locator(".what")).to_contain_text("Uncaught TypeError")
    # Loops are highlighted, other events are not.
    loop_bg = loop_row.locator("td").first.evaluate("e => getComputedStyle(e).backgroundColor")
    plain_bg = page.locator("#r1-e0 td").first.evaluate("e => getComputedStyle(e).backgroundColor")
    assert loop_bg != plain_bg, (loop_bg, plain_bg)
    # The clean run is collapsed.
    expect(page.locator("section.run#r2 > details")).not_to_have_attribute("open", "")

    page.screenshot(path=str(screenshots / "score-report.png"), full_page=True)

    # "repeats event 0" leads to the event it repeats.
    loop_row.locator(".matched a").click()
    assert page.url.endswith("#r1-e0")
    expect(page.locator("#r1-e0")).to_be_in_viewport()

    # Show flagged runs only: the clean run goes, the flagged ones stay.
    page.locator("label.filter").click()
    expect(page.locator("section.run#r2")).to_be_hidden()
    expect(rows.filter(has_text="paging-is-progress")).to_be_hidden()
    expect(page.locator("section.run#r1")).to_be_visible()
    expect(page.locator("section.run#r3")).to_be_visible()

    # Self-contained: the page asked for nothing but itself.
    assert all(u.startswith(report.as_uri()) for u in requests), requests
    p.assert_no_errors()


def test_a_collaboration_verdict_shows_what_changed_in_the_artifact(new_page, tmp_path):
    def program(extra: str) -> str:
        return ("main.py\n```python\nimport tkinter as tk\n\nclass Board:\n"
                "    def update_grid(self):\n        self.canvas.delete('all')\n"
                f"{extra}        self.draw()\n```\n")

    def say(f: str, t: str, r: str) -> dict:
        return {"type": "collaboration", "from_agent": f, "to_agent": t, "request": r}

    runs = tmp_path / "chain.jsonl"
    runs.write_text(json.dumps({"id": "review-chain", "events": [
        say("Programmer", "Code Reviewer", program("")),
        say("Code Reviewer", "Programmer", "<COMMENT> update_grid() never redraws the cells."),
        say("Programmer", "Code Reviewer", program("        self.draw_cells()\n")),
        say("Code Reviewer", "Programmer", "<COMMENT> update_grid() never redraws the cells."),
        say("Programmer", "Code Reviewer", program("        self.draw_cells()\n")),
    ]}) + "\n")
    report = tmp_path / "report.html"
    done = subprocess.run(
        [str(loopguard_bin()), "score", str(runs), "--html", str(report)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr

    p = new_page(width=1280)
    page = p.page
    page.goto(report.as_uri())
    expect(page.locator("#r1-e0 .artifacts")).to_have_text("main.py: new (5 lines)")
    expect(page.locator("#r1-e2 .artifacts")).to_have_text("main.py: +1 −0 (def update_grid(self))")
    expect(page.locator("#r1-e4 .artifacts")).to_have_text("main.py: unchanged")
    expect(page.locator("#r1-e1 .artifacts")).to_have_count(0)
    p.assert_no_errors()
