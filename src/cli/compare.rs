//! `loopguard compare`: how loopguard sees a few texts — normalised form and pairwise cosine.
//! For people choosing thresholds by hand.

use super::Cli;
use loopguard::embed::{cosine, Embedder};
use loopguard::signature::{head_tail, normalize};

#[derive(clap::Args, Debug)]
pub struct CompareArgs {
    /// Two or more texts.
    #[arg(required = true, num_args = 2..)]
    pub texts: Vec<String>,
}

pub fn run(cli: &Cli, args: &CompareArgs) -> Result<(), String> {
    let cfg = super::load_config(cli.config.as_deref(), &[]).map_err(|e| e.to_string())?;
    let embedder = Embedder::load_model(&cfg.model).map_err(|e| e.to_string())?;
    let prepared: Vec<String> = args
        .texts
        .iter()
        .map(|t| head_tail(&normalize(t), cfg.model.max_text_chars))
        .collect();
    let vectors = embedder
        .embed_blocking(&prepared)
        .map_err(|e| e.to_string())?;
    for (i, p) in prepared.iter().enumerate() {
        println!("[{i}] {p}");
    }
    for i in 0..vectors.len() {
        for j in i + 1..vectors.len() {
            let same = if prepared[i] == prepared[j] {
                " (equal after normalisation)"
            } else {
                ""
            };
            println!(
                "[{i}] ~ [{j}]  cosine {:.4}{same}",
                cosine(&vectors[i], &vectors[j])
            );
        }
    }
    Ok(())
}
