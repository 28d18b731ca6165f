//! What people read: the dashboard page and the overview routes behind it (`/v1/tasks`,
//! `/v1/loops`, `/v1/stats`).

pub mod dashboard;
pub mod overview;
