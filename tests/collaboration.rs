//! Collaboration chains on the real model: a reviewer and a programmer handing a program back and
//! forth. The program is an artifact (identity by the hash of its whole content); what changed
//! between two versions is the progress, the program re-sent unchanged after a comment the loop.

mod common;

use common::*;
use loopguard::signature::artifact::ChangeKind;
use loopguard::{Config, Verdict};

const REVIEWER: &str = "Code Reviewer";
const PROGRAMMER: &str = "Programmer";

/// A program of a few dozen lines: two versions that differ in one line read the same from their
/// head and tail, which is all the embedding sees of a long text.
fn program(extra: &str) -> String {
    let mut s = String::from("main.py\n```python\nimport tkinter as tk\nfrom game import Game\n\n");
    s.push_str("class GameApp:\n    def __init__(self, master):\n        self.master = master\n");
    s.push_str("        self.game = Game()\n        self.create_widgets()\n\n");
    for d in ["up", "down", "left", "right"] {
        s.push_str(&format!(
            "    def move_{d}(self):\n        self.game.move('{d}')\n        self.update_grid()\n\n"
        ));
    }
    s.push_str("    def update_grid(self):\n        self.canvas.delete('all')\n");
    s.push_str(extra);
    s.push_str("        for row in range(10):\n            for col in range(10):\n");
    s.push_str("                self.draw_cell(row, col)\n\n");
    s.push_str("def main():\n    root = tk.Tk()\n    GameApp(root)\n    root.mainloop()\n```\n\n");
    s.push_str("The code above implements the game window; the game logic lives in game.py.");
    s
}

const COMMENT: &str = "<COMMENT> The code is missing the implementation of the update_grid() method in the GameApp class. Without it the grid is never redrawn after a move. Add update_grid() so that the canvas shows the current state of the game grid.";
const COMMENT_REWORDED: &str = "<Comment> The update_grid() method of GameApp is not implemented, so the board is not redrawn after each move. Please implement update_grid() to draw the game grid on the canvas.";
const COMMENT_AGAIN: &str = "<COMMENT> GameApp lacks an update_grid() method: after a move the grid on the canvas is never updated. Implement update_grid() to redraw the current grid.";

fn first_rule(vs: &[Verdict]) -> Option<(usize, String)> {
    let i = first_loop(vs)?;
    Some((i, vs[i].rule.clone().unwrap_or_default()))
}

#[tokio::test]
async fn a_program_re_sent_with_a_one_line_change_after_each_comment_is_progress() {
    let e = engine(Config::default());
    let mut events = vec![collab("t", PROGRAMMER, REVIEWER, &program(""))];
    for (i, comment) in [COMMENT, COMMENT_REWORDED, COMMENT_AGAIN, COMMENT]
        .iter()
        .enumerate()
    {
        events.push(collab("t", REVIEWER, PROGRAMMER, comment));
        let fix = format!("        self.fix_{i}()\n");
        events.push(collab("t", PROGRAMMER, REVIEWER, &program(&fix)));
    }
    let vs = feed(&e, events).await;
    assert_eq!(first_rule(&vs), None, "{vs:#?}");
    // Each re-sent program names its change: one line added in update_grid, one removed after
    // the first fix.
    let change = &vs[4].artifacts[0];
    assert_eq!(change.name.as_deref(), Some("main.py"));
    assert_eq!(change.change, ChangeKind::Changed);
    assert_eq!((change.added, change.removed), (1, 1));
    assert!(
        change.parts.iter().any(|p| p.contains("update_grid")),
        "{change:?}"
    );
}

#[tokio::test]
async fn the_same_program_re_sent_after_a_comment_is_a_loop_by_its_third_occurrence() {
    let e = engine(Config::default());
    let vs = feed(
        &e,
        vec![
            collab("t", PROGRAMMER, REVIEWER, &program("")),
            collab("t", REVIEWER, PROGRAMMER, COMMENT),
            collab("t", PROGRAMMER, REVIEWER, "<INFO> Finished."),
            collab("t", PROGRAMMER, REVIEWER, &program("")),
            collab("t", REVIEWER, PROGRAMMER, COMMENT_REWORDED),
            collab("t", PROGRAMMER, REVIEWER, "<INFO> Finished."),
            collab("t", PROGRAMMER, REVIEWER, &program("")),
            collab("t", REVIEWER, PROGRAMMER, COMMENT_AGAIN),
        ],
    )
    .await;
    // The second occurrence of the comment is a review going on; the third, after a program
    // that came back unchanged, is the loop.
    assert_eq!(
        first_rule(&vs),
        Some((7, "collaboration.unchanged_artifact".to_string())),
        "{vs:#?}"
    );
    assert_eq!(vs[3].artifacts[0].change, ChangeKind::Unchanged);
    assert!(vs[7].reason.contains("3rd time"), "{}", vs[7].reason);
}

#[tokio::test]
async fn a_delivery_re_sent_unchanged_with_no_answer_between_is_a_loop() {
    let e = engine(Config::default());
    let note = |n: &str| format!("{}\n{n}", program(""));
    let vs = feed(
        &e,
        vec![
            collab(
                "t",
                PROGRAMMER,
                "Chief Technology Officer",
                &note("This is the first version of the game."),
            ),
            collab(
                "t",
                PROGRAMMER,
                "Chief Technology Officer",
                &note("Please note that some methods are placeholders."),
            ),
            collab(
                "t",
                PROGRAMMER,
                "Chief Technology Officer",
                &note("The code is complete and ready to run."),
            ),
        ],
    )
    .await;
    assert_eq!(
        first_rule(&vs),
        Some((2, "collaboration.resent_artifact".to_string())),
        "{vs:#?}"
    );
}

#[tokio::test]
async fn acknowledgements_never_match() {
    let e = engine(Config::default());
    let mut events = Vec::new();
    for ack in [
        "<INFO> Finished.",
        "<INFO> Finished",
        "OK",
        "Done.",
        "<INFO> Finished.",
        "Done.",
    ] {
        events.push(collab("t", PROGRAMMER, REVIEWER, ack));
    }
    let vs = feed(&e, events).await;
    assert_eq!(first_rule(&vs), None, "{vs:#?}");
    assert!(vs.iter().all(|v| v.matched.is_none()), "{vs:#?}");
}
