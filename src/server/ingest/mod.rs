//! Events from agents in their own formats: the coding-agent hooks (Claude Code, Gemini CLI)
//! and the OTLP receiver (GenAI and OpenInference spans), fitted to the service's limits and
//! evaluated by what they share (`integrations`).

pub mod hooks;
pub mod integrations;
pub mod otlp;
