//! The int8 model, loopguard's default (`python3 models/fetch.py` derives it into
//! `models/all-MiniLM-L6-v2-int8`): what loopguard promises about it, on the real files, against
//! the published export it is derived from (`[model] dir = "models/all-MiniLM-L6-v2"`, one
//! setting away). A missing model is a failure that says how to derive it, never a skip.

use loopguard::embed::{cosine, quantizes_activations_per_call};
use loopguard::{Config, Embedder};
use std::path::PathBuf;

fn int8_config() -> Config {
    let cfg = Config::default();
    let model = cfg.model.resolved_dir().join("model.onnx");
    assert!(
        model.is_file(),
        "{} is missing: run `python3 models/fetch.py`",
        model.display()
    );
    cfg
}

fn published_config() -> Config {
    let mut cfg = Config::default();
    cfg.model.dir = PathBuf::from("models/all-MiniLM-L6-v2");
    cfg
}

#[test]
fn the_default_model_is_the_int8_derivation_and_the_published_one_is_a_setting_away() {
    assert_eq!(
        Config::default().model.dir,
        PathBuf::from("models/all-MiniLM-L6-v2-int8")
    );
    assert!(quantizes_activations_per_call(
        &int8_config().model.resolved_dir().join("model.onnx")
    ));
    let published = published_config().model.resolved_dir().join("model.onnx");
    assert!(published.is_file(), "{}", published.display());
    assert!(!quantizes_activations_per_call(&published));
}

/// Agent texts of several lengths: a call, its reworded twin, errors, a long output.
fn texts() -> Vec<String> {
    let mut t: Vec<String> = [
        "bash command: python reproduce.py",
        "bash command: cd /repo && python reproduce.py",
        "bash command: python3 reproduce.py",
        "ModuleNotFoundError: No module named 'requests'",
        "ImportError: cannot import name 'Session' from 'requests'",
        "TypeError: unsupported operand type(s) for +: 'int' and 'str'",
        "str_replace_editor command: view path: /testbed/src/io.py view_range: [1, 40]",
        "the database timed out while the migration was running",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    t.push(
        (0..40)
            .map(|i| format!("line {i}: assert add({i}, 2) == {} failed", i + 3))
            .collect::<Vec<_>>()
            .join("\n"),
    );
    t
}

#[test]
fn the_int8_model_is_run_one_text_per_call_so_a_vector_does_not_depend_on_its_neighbours() {
    let cfg = int8_config();
    assert!(quantizes_activations_per_call(
        &cfg.model.resolved_dir().join("model.onnx")
    ));
    let texts = texts();
    // All texts in one request (the model thread would batch them) against each text alone, in
    // two embedders so that no cache answers the second time.
    let together = Embedder::load_model(&cfg.model).unwrap();
    let together = together.embed_blocking(&texts).unwrap();
    let alone = Embedder::load_model(&cfg.model).unwrap();
    for (text, v) in texts.iter().zip(&together) {
        let single = alone.embed_blocking(std::slice::from_ref(text)).unwrap();
        assert_eq!(
            single[0].as_ref(),
            v.as_ref(),
            "{text:?}: its vector changed with the texts embedded beside it"
        );
    }
}

#[test]
fn the_int8_model_keeps_the_published_models_neighbours() {
    let cfg = int8_config();
    let texts = texts();
    let published = Embedder::load_model(&published_config().model)
        .unwrap()
        .embed_blocking(&texts)
        .unwrap();
    let int8 = Embedder::load_model(&cfg.model)
        .unwrap()
        .embed_blocking(&texts)
        .unwrap();
    for ((text, p), q) in texts.iter().zip(&published).zip(&int8) {
        let c = cosine(p, q);
        assert!(
            c > 0.97,
            "{text:?}: cosine {c} to the published model's vector"
        );
    }
    // Pair cosines move by about 0.01 (docs/PERFORMANCE.md): the rewordings stay near, the
    // unrelated pairs far.
    for (i, j) in [(0, 1), (0, 2), (3, 4), (3, 5), (0, 7)] {
        let (a, b) = (
            cosine(&published[i], &published[j]),
            cosine(&int8[i], &int8[j]),
        );
        assert!(
            (a - b).abs() < 0.05,
            "{:?} ~ {:?}: published {a}, int8 {b}",
            texts[i],
            texts[j]
        );
    }
}

#[test]
fn every_worker_gives_a_text_the_same_vector() {
    // Verdicts must not depend on which worker embedded a text, nor on how many there are or
    // how many threads each has: the same bits from one worker of two threads as from three of
    // one, whichever of the three took the text.
    let texts = texts();
    let mut one = int8_config();
    one.model.workers = 1;
    one.model.threads = 2;
    let mut three = int8_config();
    three.model.workers = 3;
    three.model.threads = 1;
    let one = Embedder::load_model(&one.model).unwrap();
    let three = Embedder::load_model(&three.model).unwrap();
    assert_eq!(three.workers(), 3);
    let a = one.embed_blocking(&texts).unwrap();
    let b = three.embed_blocking(&texts).unwrap();
    for ((text, a), b) in texts.iter().zip(&a).zip(&b) {
        assert_eq!(a.as_ref(), b.as_ref(), "{text:?}");
    }
}
