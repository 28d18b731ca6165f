//! The settings a `calibrate runs` sweep goes over: axes parsed from `key=lo:hi:step` or
//! `key=a,b,c`, and the grid of checked configurations they make.

use super::*;

/// One setting swept over values: `detect.similarity.tool_call=0.8:0.96:0.02` or
/// `detect.repeats.tool_call=1,2,3`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SweepAxis {
    pub key: String,
    /// Values as TOML (numbers, booleans).
    pub values: Vec<String>,
}

/// Most values one axis may take, and most points a sweep may have: a sweep replays every run
/// at every point.
pub const MAX_AXIS_VALUES: usize = 200;
pub const MAX_POINTS: usize = 500;

impl std::str::FromStr for SweepAxis {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (key, spec) = s.split_once('=').ok_or_else(|| {
            format!("`{s}`: expected KEY=VALUES, e.g. detect.similarity.tool_call=0.8:0.96:0.02")
        })?;
        let key = key.trim();
        if key.is_empty() || key.split('.').any(str::is_empty) {
            return Err(format!("`{s}`: the key must be a dotted config path"));
        }
        let spec = spec.trim();
        let values = if spec.split(':').count() == 3 {
            range_values(spec).map_err(|e| format!("`{s}`: {e}"))?
        } else {
            spec.split(',')
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
                .collect()
        };
        if values.is_empty() {
            return Err(format!("`{s}`: no values"));
        }
        if values.len() > MAX_AXIS_VALUES {
            return Err(format!(
                "`{s}`: {} values; at most {MAX_AXIS_VALUES}",
                values.len()
            ));
        }
        Ok(SweepAxis {
            key: key.to_string(),
            values,
        })
    }
}

/// `START:STOP:STEP`, both ends included, written with as many decimals as the inputs use (so
/// 0.8:0.9:0.05 gives 0.80, 0.85, 0.90 and 1:3:1 gives integers).
fn range_values(spec: &str) -> Result<Vec<String>, String> {
    let parts: Vec<&str> = spec.split(':').map(str::trim).collect();
    let parse = |p: &str| {
        p.parse::<f64>()
            .ok()
            .filter(|v| v.is_finite())
            .ok_or_else(|| format!("`{p}` is not a number"))
    };
    let (start, stop, step) = (parse(parts[0])?, parse(parts[1])?, parse(parts[2])?);
    if step <= 0.0 || stop < start {
        return Err("a range START:STOP:STEP needs STEP > 0 and STOP ≥ START".into());
    }
    let decimals = parts
        .iter()
        .map(|p| p.split_once('.').map(|(_, d)| d.len()).unwrap_or(0))
        .max()
        .unwrap_or(0);
    let count = ((stop - start) / step + 1e-9).floor() as usize + 1;
    if count > MAX_AXIS_VALUES {
        return Err(format!("{count} values; at most {MAX_AXIS_VALUES}"));
    }
    Ok((0..count)
        .map(|i| format!("{:.decimals$}", start + i as f64 * step))
        .collect())
}

/// One setting of a sweep point.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Setting {
    pub key: String,
    /// As TOML.
    pub value: String,
}

/// One point of the sweep: its settings and the configuration they make.
#[derive(Debug, Clone)]
pub struct SweepPoint {
    pub settings: Vec<Setting>,
    pub config: Arc<Config>,
}

/// Every combination of the axes' values applied over `base` (the last axis varies fastest),
/// each checked like a config file is. No axes: the one point `base`.
pub fn plan_sweep(base: &Config, axes: &[SweepAxis]) -> Result<Vec<SweepPoint>, CalibrateError> {
    let total: usize = axes.iter().map(|a| a.values.len()).product();
    if total > MAX_POINTS {
        return Err(CalibrateError::Invalid(format!(
            "the sweep has {total} points; at most {MAX_POINTS} (every run is replayed at every point)"
        )));
    }
    for (i, a) in axes.iter().enumerate() {
        if axes[..i].iter().any(|b| b.key == a.key) {
            return Err(CalibrateError::Invalid(format!(
                "`{}` is swept twice",
                a.key
            )));
        }
    }
    let base_toml = base.to_toml();
    let mut points = Vec::with_capacity(total);
    for n in 0..total {
        let mut rest = n;
        let mut settings = vec![
            Setting {
                key: String::new(),
                value: String::new()
            };
            axes.len()
        ];
        for (i, a) in axes.iter().enumerate().rev() {
            let v = &a.values[rest % a.values.len()];
            rest /= a.values.len();
            settings[i] = Setting {
                key: a.key.clone(),
                value: v.clone(),
            };
        }
        let overrides: Vec<(String, String)> = settings
            .iter()
            .map(|s| (s.key.clone(), s.value.clone()))
            .collect();
        let config = Config::load(
            Some(("the effective configuration", &base_toml)),
            std::iter::empty(),
            &overrides,
        )
        .map_err(|e| {
            CalibrateError::Invalid(format!("sweep point {}: {e}", describe(&settings)))
        })?;
        points.push(SweepPoint {
            settings,
            config: Arc::new(config),
        });
    }
    Ok(points)
}

/// `key=value, key=value` (or "the configuration as given" for the point without settings).
pub fn describe(settings: &[Setting]) -> String {
    if settings.is_empty() {
        return "the configuration as given".into();
    }
    settings
        .iter()
        .map(|s| format!("{}={}", s.key, s.value))
        .collect::<Vec<_>>()
        .join(", ")
}
