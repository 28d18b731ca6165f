//! Secrets out of what is shown: database URLs, judge URLs.

/// What a secret is replaced with when the configuration is shown.
pub const REDACTED: &str = "<redacted>";

/// A database URL without its credentials: the user and password, and a `password=` parameter.
pub fn redact_database_url(url: &str) -> String {
    let url = redact_userinfo(url);
    let Some((base, query)) = url.split_once('?') else {
        return url;
    };
    let query: Vec<String> = query
        .split('&')
        .map(|kv| match kv.split_once('=') {
            Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}={REDACTED}"),
            _ => kv.to_string(),
        })
        .collect();
    format!("{base}?{}", query.join("&"))
}

/// A URL with every query parameter's value replaced: `?api_key=…`, `?code=…` and the like
/// are credentials as often as not, and the URL without them still says where it points.
pub(crate) fn redact_query(url: &str) -> String {
    let Some((base, rest)) = url.split_once('?') else {
        return url.to_string();
    };
    let (query, fragment) = match rest.split_once('#') {
        Some((q, f)) => (q, Some(f)),
        None => (rest, None),
    };
    let query: Vec<String> = query
        .split('&')
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) if !v.is_empty() => format!("{k}={REDACTED}"),
            _ => kv.to_string(),
        })
        .collect();
    let mut out = format!("{base}?{}", query.join("&"));
    if let Some(f) = fragment {
        out.push('#');
        out.push_str(f);
    }
    out
}

pub(crate) fn redact_userinfo(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://{REDACTED}@{}", &rest[at + 1..]),
        None => url.to_string(),
    }
}
