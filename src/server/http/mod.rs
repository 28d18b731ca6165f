//! HTTP plumbing, the same for every route: connections and their timeouts, bodies, the one
//! error body, path and query parameters, field limits and time on the wire. It knows nothing
//! of the routes it carries: no module here uses `api`, `ingest`, `views` or the server's state.

pub mod body;
pub mod conn;
pub mod error;
pub mod limits;
pub mod params;
pub mod time;
