"""The dashboard in a real browser: `loopguard serve` (real model) gets an agent's events that
make a reworded loop, and headless Chromium shows the task, its timeline and the loop; with a
token set, the page asks for it and sends it as a bearer header."""

from __future__ import annotations

import re

from playwright.sync_api import expect

LOOPING = "fix-login-timeout"

# An agent that keeps rewording the same failing test: a warning, a pivot directive, then the
# gate pauses the task for a human.
LOOP_EVENTS = [
    {"type": "tool_call", "tool": "bash", "args": {"cmd": "pytest tests/test_login.py"},
     "result": {"output": "FAILED tests/test_login.py::test_session_expiry - AssertionError: "
                          "session expired after 300s, expected 900s", "exit_code": 1}},
    {"type": "failure", "message": "AssertionError: session expired after 300s, expected 900s "
                                   "in tests/test_login.py:42"},
    {"type": "tool_call", "tool": "edit", "args": {"path": "auth/session.py", "old": "TTL = 300",
                                                   "new": "TTL = 900"},
     "result": {"output": "ok"}},
    {"type": "failure", "message": "AssertionError: the session expired after 300 seconds, but "
                                   "900 seconds were expected (tests/test_login.py:42)"},
    {"type": "tool_call", "tool": "edit", "args": {"path": "auth/session.py",
                                                   "old": "SESSION_TTL = 300",
                                                   "new": "SESSION_TTL = 900"},
     "result": {"output": "ok"}},
    {"type": "failure", "message": "test_session_expiry failed: session expired after 300s "
                                   "instead of the expected 900s at tests/test_login.py:42"},
    {"type": "failure", "message": "AssertionError: session expired after 300s; expected 900s "
                                   "- tests/test_login.py line 42"},
]

# Paging through a file is progress, not a loop.
PAGING = [
    {"type": "tool_call", "tool": "bash", "args": {"cmd": f"sed -n {a},{a + 50}p docs/api.md"},
     "result": {"output": f"## Section {i}\nGET /v1/items/{i} returns item {i} with {i * 3} fields."}}
    for i, a in enumerate(range(1, 200, 50))
]

# An exact loop that a human resolved; its text tries to be markup, which must stay text.
DEPLOY = [
    {"type": "tool_call", "tool": "kubectl", "args": {"cmd": "rollout status deploy/web"},
     "result": {"output": 'error: deployment "web" exceeded its progress deadline <img src=x '
                          'onerror=alert(1)>', "is_error": True}}
] * 3 + [{"type": "outcome", "result": "human_intervention",
          "note": "image tag was wrong; fixed by on-call"}]


def post_scenario(server) -> list[dict]:
    for e in DEPLOY:
        server.evaluate({"task_id": "deploy-staging", "agent_id": "ops", "event": e})
    for e in PAGING:
        server.evaluate({"task_id": "paginate-api-docs", "agent_id": "writer", "event": e})
    verdicts = [server.evaluate({"task_id": LOOPING, "agent_id": "coder", "event": e})
                for e in LOOP_EVENTS]
    # What the page must show, as the service decided it.
    assert [v["kind"] for v in verdicts][3:] == ["semantic_repeat", "none", "semantic_repeat",
                                                 "semantic_repeat"], verdicts
    assert [v["action"]["type"] for v in verdicts][-3:] == ["continue", "pivot", "pause"]
    assert verdicts[-1]["status"] == "paused"
    return verdicts


def row(page, task_id):
    return page.locator(f'#tasks tbody tr[data-task="{task_id}"]')


def test_a_looping_task_its_timeline_and_the_loop_appear(start_server, new_page, screenshots):
    server = start_server()
    verdicts = post_scenario(server)
    p = new_page()
    page = p.page
    page.goto(server.base + "/")

    # The task list: the looping task is paused with its loop counter and pivot.
    looping = row(page, LOOPING)
    expect(looping).to_be_visible()
    expect(looping.locator("td").nth(1)).to_have_text("paused")
    expect(looping.locator("td").nth(2)).to_have_text("3")
    expect(looping.locator("td").nth(3)).to_have_text("1")
    expect(looping.locator("td").nth(4)).to_have_text("7")
    expect(looping.locator("td").nth(5)).to_have_text("semantic repeat")
    expect(row(page, "paginate-api-docs").locator("td").nth(2)).to_have_text("0")
    expect(page.locator("#tasks-note")).to_have_text("3 in all")

    # It is selected first (it needs a look), and its timeline has every verdict.
    expect(looping).to_have_class(re.compile(r"\bselected\b"))
    expect(page.locator(".task-head .tid")).to_have_text(LOOPING)
    events = page.locator("#timeline li.ev")
    expect(events).to_have_count(7)
    newest = events.first
    expect(newest).to_have_attribute("data-seq", "7")
    expect(newest).to_have_class(re.compile(r"\bloop\b"))
    expect(newest.locator(".badge.b-kind")).to_have_text("semantic repeat")
    sim = f"{verdicts[-1]['similarity']:.2f}"
    expect(newest.locator(".sim")).to_have_text(f"cos {sim}")
    expect(newest.locator(".matched b")).to_have_text(f"matches #{verdicts[-1]['matched']['seq']}")
    expect(newest.locator(".b-act-pause")).to_be_visible()
    expect(newest.locator(".reason")).to_contain_text("reworded")
    expect(page.locator('#timeline li.ev[data-seq="6"] .b-act-pivot')).to_be_visible()
    expect(page.locator('#timeline li.ev[data-seq="5"]')).not_to_have_class(re.compile(r"\bloop\b"))
    # The first tool call shows its result, as compared.
    expect(page.locator('#timeline li.ev[data-seq="1"] .text')).to_contain_text("test_session_expiry")
    # The audit trail between them: the pivot directive and the gate.
    expect(page.locator('#timeline li.audit[data-audit="pivot_issued"]')).to_contain_text("Pivot directive issued")
    expect(page.locator('#timeline li.audit[data-audit="gate_triggered"]')).to_contain_text("paused for a human")

    # Recent loops across tasks, with resolutions.
    loops = page.locator("#loops li")
    expect(loops.filter(has_text=LOOPING).first).to_contain_text("unresolved")
    deploy = loops.filter(has_text="deploy-staging")
    expect(deploy).to_contain_text("exact repeat")
    expect(deploy).to_contain_text("human intervention")
    expect(deploy).to_contain_text("image tag was wrong")
    # Agent text is text: the <img onerror> in the output was not turned into an element.
    expect(deploy.locator(".loop-text")).to_contain_text("<img src=x onerror=alert(1)>")
    assert page.locator("#loops img").count() == 0

    # Live figures from the metrics: 15 events in the last minute, a loop count, latency.
    expect(page.locator("#fig-rate .detail")).to_contain_text("15 events")
    expect(page.locator("#fig-loops .value")).to_have_text("4")
    expect(page.locator("#fig-latency .value")).to_contain_text(re.compile(r"\d+(\.\d)? / \d+"))
    expect(page.locator("#fig-model .value")).to_contain_text("%")
    expect(page.locator("#fig-judge .detail")).to_contain_text("no judge configured")
    expect(page.locator("#model")).to_have_text("model ready")

    page.screenshot(path=str(screenshots / "dashboard.png"), full_page=True)

    # Clicking another task shows its timeline; the choice is kept in the URL.
    row(page, "paginate-api-docs").click()
    expect(page.locator(".task-head .tid")).to_have_text("paginate-api-docs")
    expect(page.locator("#timeline li.ev")).to_have_count(4)
    expect(page.locator("#timeline li.ev.loop")).to_have_count(0)
    assert page.url.endswith("#task=paginate-api-docs")

    # New events show up without a reload.
    server.evaluate({"task_id": "late-arrival", "event": {"type": "response", "text": "Starting."}})
    expect(row(page, "late-arrival")).to_be_visible(timeout=10_000)

    p.assert_no_errors()

    # A task deleted while shown says so, and is not asked for again.
    status, _ = server.request("DELETE", "/v1/tasks/paginate-api-docs")
    assert status == 204
    expect(page.locator("#task-empty")).to_contain_text("gone", timeout=10_000)
    asked = []
    page.on("request", lambda r: "paginate-api-docs" in r.url and asked.append(r.url))
    page.wait_for_timeout(4000)
    assert asked == [], asked
    # The browser logs the two 404s (task and history) that told it so.
    p.assert_no_errors(allow=("404",))


def test_with_a_token_the_page_asks_for_it_and_sends_it_as_a_bearer_header(
        start_server, new_page, screenshots):
    server = start_server(token="dashboard-test-token")
    post_scenario(server)
    p = new_page()
    page = p.page
    sent, urls = [], []
    page.on("request", lambda r: r.url.startswith(server.base + "/v1/") and sent.append(
        r.headers.get("authorization")))
    page.on("request", lambda r: urls.append(r.url))
    page.goto(server.base + "/")

    # The shell loads without the token, shows no data and asks for it.
    login = page.locator("#login")
    expect(login).to_be_visible()
    expect(page.locator("#conn")).to_have_text("token needed")
    assert page.locator("#tasks tbody tr").count() == 0
    assert LOOPING not in page.content()
    page.screenshot(path=str(screenshots / "dashboard-token.png"))

    page.fill("#token", "not-the-token")
    page.click("#login-form button[type=submit]")
    expect(page.locator("#login-error")).to_have_text("That token was refused.")
    expect(login).to_be_visible()

    page.fill("#token", "dashboard-test-token")
    page.click("#login-form button[type=submit]")
    expect(login).to_be_hidden()
    expect(row(page, LOOPING)).to_be_visible()
    expect(page.locator("#timeline li.ev")).to_have_count(7)
    assert "Bearer dashboard-test-token" in sent
    # Never in a URL or a cookie: only in this tab's storage.
    assert urls and all("dashboard-test-token" not in u for u in urls + [page.url])
    assert page.context.cookies() == []
    assert page.evaluate("sessionStorage.getItem('loopguard.token')") == "dashboard-test-token"

    # A reload in the same tab stays signed in; signing out forgets the token.
    page.reload()
    expect(row(page, LOOPING)).to_be_visible()
    page.click("#signout")
    expect(login).to_be_visible()
    assert page.evaluate("sessionStorage.getItem('loopguard.token')") is None
    # The refused requests are the only errors (the browser logs each 401).
    p.assert_no_errors(allow=("401",))


def review_program(extra: str) -> str:
    return ("main.py\n```python\nimport tkinter as tk\n\nclass Board:\n    def update_grid(self):\n"
            f"        self.canvas.delete('all')\n{extra}        self.draw()\n```\n")


def test_a_collaboration_verdict_shows_what_changed_in_the_artifact(start_server, new_page):
    server = start_server()
    task = "review-board"
    chain = [
        ("Programmer", "Code Reviewer", review_program("")),
        ("Code Reviewer", "Programmer", "<COMMENT> update_grid() never redraws the cells after a "
                                         "move; call draw_cells() there."),
        ("Programmer", "Code Reviewer", review_program("        self.draw_cells()\n")),
    ]
    verdicts = [server.evaluate({"task_id": task, "agent_id": f, "event": {
        "type": "collaboration", "from_agent": f, "to_agent": t, "request": r}})
        for f, t, r in chain]
    assert verdicts[0]["artifacts"][0]["change"] == "new", verdicts[0]
    assert verdicts[1].get("artifacts") is None, verdicts[1]
    changed = verdicts[2]["artifacts"][0]
    assert (changed["name"], changed["change"], changed["added"], changed["removed"]) == (
        "main.py", "changed", 1, 0), changed

    p = new_page()
    page = p.page
    page.goto(server.base + f"/#task={task}")
    expect(page.locator(".task-head .tid")).to_have_text(task)
    expect(page.locator('#timeline li.ev[data-seq="1"] .artifacts')).to_have_text(
        "main.py: new (5 lines)")
    expect(page.locator('#timeline li.ev[data-seq="3"] .artifacts')).to_have_text(
        "main.py: +1 −0 (def update_grid(self))")
    expect(page.locator('#timeline li.ev[data-seq="2"] .artifacts')).to_have_count(0)
    p.assert_no_errors()
