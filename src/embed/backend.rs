//! Model backends: [`FastEmbedBackend`] runs all-MiniLM-L6-v2 (ONNX, mean pooling,
//! L2-normalised, 384-d) through fastembed with ONNX Runtime loaded at run time;
//! [`StubBackend`] is a lexical stand-in for fast unit tests of detector logic, never the default.

use super::*;

/// The real model: all-MiniLM-L6-v2 through fastembed and ONNX Runtime.
pub struct FastEmbedBackend {
    model: fastembed::TextEmbedding,
    description: String,
}

const MODEL_FILES: [&str; 5] = [
    "model.onnx",
    "tokenizer.json",
    "config.json",
    "special_tokens_map.json",
    "tokenizer_config.json",
];

static ORT_ENV: OnceLock<Result<ort::environment::Environment, EmbedError>> = OnceLock::new();

fn ort_environment(dylib: &Path) -> Result<ort::environment::Environment, EmbedError> {
    ORT_ENV
        .get_or_init(|| {
            let path = dylib.display().to_string();
            let builder = ort::init_from(dylib).map_err(|e| EmbedError::RuntimeLoad {
                path: path.clone(),
                message: e.to_string(),
            })?;
            builder
                .with_name("loopguard")
                .build()
                .map_err(|e| EmbedError::RuntimeLoad {
                    path,
                    message: e.to_string(),
                })
        })
        .clone()
}

impl FastEmbedBackend {
    /// Load the model files from `cfg.dir` and ONNX Runtime from `cfg.ort_dylib`. Missing files are
    /// reported with the command that fetches them, before ort gets a chance to panic on them.
    pub fn load(cfg: &ModelConfig) -> Result<Self, EmbedError> {
        if cfg.source == crate::config::ModelSource::Hub {
            return Self::load_from_hub(cfg);
        }
        let dir = cfg.resolved_dir();
        let mut files = Vec::with_capacity(MODEL_FILES.len());
        for name in MODEL_FILES {
            let path = dir.join(name);
            let bytes = std::fs::read(&path).map_err(|_| EmbedError::ModelMissing(path))?;
            files.push(bytes);
        }
        let env = Self::runtime(cfg)?;
        let mut files = files.into_iter();
        let onnx = files.next().expect("five files");
        let products = if has_dynamic_quantization(&onnx) {
            "matrix products in int8"
        } else {
            "matrix products in fp32"
        };
        let tokenizer_files = fastembed::TokenizerFiles {
            tokenizer_file: files.next().expect("five files"),
            config_file: files.next().expect("five files"),
            special_tokens_map_file: files.next().expect("five files"),
            tokenizer_config_file: files.next().expect("five files"),
        };
        // The model needs mean pooling (fastembed's default for user models is CLS: wrong vectors,
        // no error) and was trained with 256 tokens.
        let model = fastembed::UserDefinedEmbeddingModel::new(onnx, tokenizer_files)
            .with_pooling(fastembed::Pooling::Mean);
        let opts = fastembed::InitOptionsUserDefined::new()
            .with_environment(env)
            .with_max_length(cfg.max_tokens)
            .with_intra_threads(cfg.threads.max(1));
        let model = fastembed::TextEmbedding::try_new_from_user_defined(model, opts)
            .map_err(|e| EmbedError::Model(e.to_string()))?;
        Ok(FastEmbedBackend {
            model,
            description: format!(
                "all-MiniLM-L6-v2 ({products}, mean pooling) from {}, {} thread(s)",
                dir.display(),
                cfg.threads.max(1)
            ),
        })
    }

    fn runtime(cfg: &ModelConfig) -> Result<ort::environment::Environment, EmbedError> {
        let dylib = cfg.resolved_ort_dylib();
        if !dylib.is_file() {
            return Err(EmbedError::RuntimeMissing(dylib));
        }
        ort_environment(&dylib)
    }

    #[cfg(feature = "hf-hub")]
    fn load_from_hub(cfg: &ModelConfig) -> Result<Self, EmbedError> {
        let env = Self::runtime(cfg)?;
        let opts = fastembed::TextInitOptions::new(fastembed::EmbeddingModel::AllMiniLML6V2)
            .with_cache_dir(cfg.resolved_dir())
            .with_max_length(cfg.max_tokens)
            .with_intra_threads(cfg.threads.max(1))
            .with_environment(env);
        let model = fastembed::TextEmbedding::try_new(opts)
            .map_err(|e| EmbedError::Model(e.to_string()))?;
        Ok(FastEmbedBackend {
            model,
            description: "all-MiniLM-L6-v2 (fastembed hub download)".into(),
        })
    }

    #[cfg(not(feature = "hf-hub"))]
    fn load_from_hub(_cfg: &ModelConfig) -> Result<Self, EmbedError> {
        Err(EmbedError::Unavailable(
            "[model] source = \"hub\" needs loopguard built with `--features hf-hub`".into(),
        ))
    }
}

impl EmbedBackend for FastEmbedBackend {
    fn embed_batch(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.model
            .embed(texts, Some(texts.len().max(1)))
            .map_err(|e| EmbedError::Model(e.to_string()))
    }

    fn describe(&self) -> String {
        self.description.clone()
    }
}

/// A lexical stand-in for the model: hashed word and character-trigram counts, L2-normalised.
/// Texts sharing most words score high, unrelated texts near zero. Only for fast unit tests of
/// detector logic; every similarity-dependent behaviour is also tested with the real model.
pub struct StubBackend;

impl StubBackend {
    pub fn vector(text: &str) -> Vec<f32> {
        let mut v = vec![0f32; DIM];
        let lower = text.to_lowercase();
        for word in lower
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
        {
            let h = crate::signature::key64(word);
            v[(h % DIM as u64) as usize] += 1.0;
            let chars: Vec<char> = word.chars().collect();
            for w in chars.windows(3) {
                let tri: String = w.iter().collect();
                let h = crate::signature::key64(&tri);
                v[(h % DIM as u64) as usize] += 0.3;
            }
        }
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        if norm > 0.0 {
            v.iter_mut().for_each(|x| *x /= norm);
        }
        v
    }
}

impl EmbedBackend for StubBackend {
    fn embed_batch(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts.iter().map(|t| StubBackend::vector(t)).collect())
    }

    fn describe(&self) -> String {
        "lexical stub (tests only)".into()
    }
}
