//! Time on the wire: RFC 3339 text out, and a client's timestamp kept near the server's clock.

/// `t`, moved to within `skew_secs` of the server's time.
pub fn clamp_to_now(t: time::OffsetDateTime, skew_secs: u64) -> time::OffsetDateTime {
    let now = time::OffsetDateTime::now_utc();
    let skew = time::Duration::seconds(skew_secs.min(i64::MAX as u64) as i64);
    let (earliest, latest) = (now.saturating_sub(skew), now.saturating_add(skew));
    if t < earliest {
        earliest
    } else if t > latest {
        latest
    } else {
        t
    }
}

pub fn rfc3339(ts: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(ts)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default()
}
