//! What people read: the dashboard page, the overview routes (`/v1/tasks`, `/v1/loops`,
//! `/v1/stats`) with their live figures, and the Prometheus metrics every layer counts into.

pub mod dashboard;
pub mod live;
pub mod metrics;
pub mod overview;
