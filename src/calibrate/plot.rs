//! Small SVG charts for calibration reports: lines, points, histograms and reference lines on
//! linear axes. Written by hand instead of pulling in a plotting crate: the charts need a few
//! hundred lines of SVG text, a plotting library needs a longer build than all of this module.
//!
//! Colours are the Okabe–Ito palette (distinguishable with the common colour-vision deficiencies);
//! every series also has its own dash pattern or marker so the charts survive grey-scale printing.

use std::fmt::Write as _;

const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 440.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 56.0;

/// Okabe–Ito, black last.
pub const PALETTE: [&str; 8] = [
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000",
];

/// Where the legend sits inside the plot area.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Corner {
    /// Whichever corner covers the fewest drawn points.
    Auto,
    TopLeft,
    TopRight,
    BottomLeft,
    BottomRight,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dash {
    Solid,
    Dashed,
    Dotted,
    DashDot,
}

impl Dash {
    fn attr(self) -> &'static str {
        match self {
            Dash::Solid => "",
            Dash::Dashed => r#" stroke-dasharray="7 4""#,
            Dash::Dotted => r#" stroke-dasharray="2 3""#,
            Dash::DashDot => r#" stroke-dasharray="9 3 2 3""#,
        }
    }
}

#[derive(Debug, Clone)]
enum Shape {
    Line(Vec<(f64, f64)>, Dash),
    Points(Vec<(f64, f64)>),
    /// Bars over `edges` (one more edge than heights), filled translucently.
    Histogram(Vec<f64>, Vec<f64>),
    /// A vertical reference line at x.
    VLine(f64, Dash),
}

#[derive(Debug, Clone)]
struct Series {
    name: Option<String>,
    color: &'static str,
    shape: Shape,
}

/// A chart on linear axes.
#[derive(Debug, Clone)]
pub struct Chart {
    title: String,
    x_label: String,
    y_label: String,
    x: (f64, f64),
    y: (f64, f64),
    legend: Corner,
    series: Vec<Series>,
    /// Names of the x positions 0, 1, 2, ... in place of numeric ticks (bars over categories).
    categories: Vec<String>,
}

impl Chart {
    pub fn new(
        title: impl Into<String>,
        x_label: impl Into<String>,
        y_label: impl Into<String>,
        x: (f64, f64),
        y: (f64, f64),
    ) -> Chart {
        let widen = |(lo, hi): (f64, f64)| {
            if hi > lo && lo.is_finite() && hi.is_finite() {
                (lo, hi)
            } else if lo.is_finite() {
                (lo - 0.5, lo + 0.5)
            } else {
                (0.0, 1.0)
            }
        };
        Chart {
            title: title.into(),
            x_label: x_label.into(),
            y_label: y_label.into(),
            x: widen(x),
            y: widen(y),
            legend: Corner::BottomRight,
            series: Vec::new(),
            categories: Vec::new(),
        }
    }

    /// Label the x positions 0, 1, 2, ... with names instead of numbers (bars over categories).
    pub fn categories(mut self, names: Vec<String>) -> Self {
        self.categories = names;
        self
    }

    pub fn legend(mut self, corner: Corner) -> Self {
        self.legend = corner;
        self
    }

    /// A polyline; consecutive points closer than a fraction of a pixel are merged, so a curve of
    /// ten thousand points stays a small file.
    pub fn line(
        &mut self,
        name: Option<&str>,
        color: &'static str,
        dash: Dash,
        points: &[(f64, f64)],
    ) -> &mut Self {
        let pts = simplify(
            points,
            (self.x.1 - self.x.0) / 1500.0,
            (self.y.1 - self.y.0) / 1000.0,
        );
        self.push(name, color, Shape::Line(pts, dash))
    }

    pub fn points(
        &mut self,
        name: Option<&str>,
        color: &'static str,
        points: &[(f64, f64)],
    ) -> &mut Self {
        self.push(name, color, Shape::Points(points.to_vec()))
    }

    pub fn histogram(
        &mut self,
        name: Option<&str>,
        color: &'static str,
        edges: &[f64],
        heights: &[f64],
    ) -> &mut Self {
        self.push(
            name,
            color,
            Shape::Histogram(edges.to_vec(), heights.to_vec()),
        )
    }

    pub fn vline(
        &mut self,
        name: Option<&str>,
        color: &'static str,
        dash: Dash,
        x: f64,
    ) -> &mut Self {
        self.push(name, color, Shape::VLine(x, dash))
    }

    fn push(&mut self, name: Option<&str>, color: &'static str, shape: Shape) -> &mut Self {
        self.series.push(Series {
            name: name.map(str::to_string),
            color,
            shape,
        });
        self
    }

    fn px(&self, x: f64) -> f64 {
        let x = x.clamp(self.x.0, self.x.1);
        LEFT + (x - self.x.0) / (self.x.1 - self.x.0) * (WIDTH - LEFT - RIGHT)
    }

    fn py(&self, y: f64) -> f64 {
        let y = y.clamp(self.y.0, self.y.1);
        HEIGHT - BOTTOM - (y - self.y.0) / (self.y.1 - self.y.0) * (HEIGHT - TOP - BOTTOM)
    }

    /// The chart as a standalone SVG document.
    pub fn to_svg(&self) -> String {
        let mut s = String::with_capacity(16 * 1024);
        let _ = write!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="Helvetica, Arial, DejaVu Sans, sans-serif" font-size="12">"#
        );
        s.push('\n');
        let _ = writeln!(
            s,
            r##"<rect width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>"##
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="24" text-anchor="middle" font-size="15" font-weight="bold">{}</text>"#,
            WIDTH / 2.0,
            escape(&self.title)
        );
        self.axes(&mut s);
        let _ = writeln!(
            s,
            r#"<clipPath id="plot"><rect x="{LEFT}" y="{TOP}" width="{:.1}" height="{:.1}"/></clipPath>"#,
            WIDTH - LEFT - RIGHT,
            HEIGHT - TOP - BOTTOM
        );
        s.push_str("<g clip-path=\"url(#plot)\">\n");
        for series in &self.series {
            self.draw(&mut s, series);
        }
        s.push_str("</g>\n");
        self.draw_legend(&mut s);
        s.push_str("</svg>\n");
        s
    }

    fn axes(&self, s: &mut String) {
        let (x0, x1, y0, y1) = (LEFT, WIDTH - RIGHT, TOP, HEIGHT - BOTTOM);
        // Category names that would overlap take turns over up to three rows.
        let spacing = if self.categories.len() > 1 {
            self.px(1.0) - self.px(0.0)
        } else {
            f64::INFINITY
        };
        let widest = self
            .categories
            .iter()
            .map(|c| c.chars().count() as f64 * 6.2)
            .fold(0.0, f64::max);
        let rows = (1..=3).find(|r| widest <= *r as f64 * spacing).unwrap_or(3);
        for (i, name) in self.categories.iter().enumerate() {
            let x = self.px(i as f64);
            let row = (i % rows) as f64 * 14.0;
            let _ = writeln!(
                s,
                r##"<line x1="{x:.1}" y1="{y1:.1}" x2="{x:.1}" y2="{:.1}" stroke="#555555"/><text x="{x:.1}" y="{:.1}" text-anchor="middle" font-size="11">{}</text>"##,
                y1 + 4.0,
                y1 + 15.0 + row,
                escape(name)
            );
        }
        let x_ticks = if self.categories.is_empty() {
            ticks(self.x.0, self.x.1)
        } else {
            Vec::new()
        };
        for t in x_ticks {
            let x = self.px(t);
            let _ = writeln!(
                s,
                r##"<line x1="{x:.1}" y1="{y0:.1}" x2="{x:.1}" y2="{y1:.1}" stroke="#e5e5e5"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
                y1 + 16.0,
                tick_label(t, self.x)
            );
        }
        for t in ticks(self.y.0, self.y.1) {
            let y = self.py(t);
            let _ = writeln!(
                s,
                r##"<line x1="{x0:.1}" y1="{y:.1}" x2="{x1:.1}" y2="{y:.1}" stroke="#e5e5e5"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
                x0 - 6.0,
                y + 4.0,
                tick_label(t, self.y)
            );
        }
        let _ = writeln!(
            s,
            r##"<rect x="{x0:.1}" y="{y0:.1}" width="{:.1}" height="{:.1}" fill="none" stroke="#555555"/>"##,
            x1 - x0,
            y1 - y0
        );
        // Three rows of category names leave no room for the axis label: the title says it.
        if rows < 3 {
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                (x0 + x1) / 2.0,
                HEIGHT
                    - if self.categories.is_empty() {
                        14.0
                    } else {
                        8.0
                    },
                escape(&self.x_label)
            );
        }
        let _ = writeln!(
            s,
            r#"<text x="16" y="{:.1}" text-anchor="middle" transform="rotate(-90 16 {:.1})">{}</text>"#,
            (y0 + y1) / 2.0,
            (y0 + y1) / 2.0,
            escape(&self.y_label)
        );
    }

    fn draw(&self, s: &mut String, series: &Series) {
        let c = series.color;
        match &series.shape {
            Shape::Line(pts, dash) => {
                if pts.is_empty() {
                    return;
                }
                s.push_str("<polyline fill=\"none\" stroke-width=\"2\" stroke-linejoin=\"round\"");
                let _ = write!(s, r#" stroke="{c}"{} points=""#, dash.attr());
                for (i, (x, y)) in pts.iter().enumerate() {
                    if i > 0 {
                        s.push(' ');
                    }
                    let _ = write!(s, "{:.1},{:.1}", self.px(*x), self.py(*y));
                }
                s.push_str("\"/>\n");
            }
            Shape::Points(pts) => {
                for (x, y) in pts {
                    let _ = writeln!(
                        s,
                        r##"<circle cx="{:.1}" cy="{:.1}" r="4.5" fill="{c}" stroke="#ffffff" stroke-width="1"/>"##,
                        self.px(*x),
                        self.py(*y)
                    );
                }
            }
            Shape::Histogram(edges, heights) => {
                for (i, h) in heights.iter().enumerate() {
                    if *h <= 0.0 || i + 1 >= edges.len() {
                        continue;
                    }
                    let (xa, xb) = (self.px(edges[i]), self.px(edges[i + 1]));
                    let (ya, yb) = (self.py(*h), self.py(self.y.0.max(0.0)));
                    let _ = writeln!(
                        s,
                        r#"<rect x="{xa:.1}" y="{ya:.1}" width="{:.1}" height="{:.1}" fill="{c}" fill-opacity="0.35" stroke="{c}" stroke-width="1"/>"#,
                        (xb - xa).max(0.5),
                        (yb - ya).max(0.0)
                    );
                }
            }
            Shape::VLine(x, dash) => {
                let px = self.px(*x);
                let _ = writeln!(
                    s,
                    r#"<line x1="{px:.1}" y1="{TOP:.1}" x2="{px:.1}" y2="{:.1}" stroke="{c}" stroke-width="1.5"{}/>"#,
                    HEIGHT - BOTTOM,
                    dash.attr()
                );
            }
        }
    }

    fn draw_legend(&self, s: &mut String) {
        let named: Vec<&Series> = self.series.iter().filter(|x| x.name.is_some()).collect();
        if named.is_empty() {
            return;
        }
        let longest = named
            .iter()
            .map(|x| x.name.as_deref().unwrap_or("").chars().count())
            .max()
            .unwrap_or(0);
        let w = 40.0 + longest as f64 * 6.6;
        let h = 8.0 + named.len() as f64 * 18.0;
        let at = |corner: Corner| match corner {
            Corner::TopLeft | Corner::Auto => (LEFT + 10.0, TOP + 10.0),
            Corner::TopRight => (WIDTH - RIGHT - 10.0 - w, TOP + 10.0),
            Corner::BottomLeft => (LEFT + 10.0, HEIGHT - BOTTOM - 10.0 - h),
            Corner::BottomRight => (WIDTH - RIGHT - 10.0 - w, HEIGHT - BOTTOM - 10.0 - h),
        };
        let corner = match self.legend {
            Corner::Auto => [
                Corner::TopRight,
                Corner::TopLeft,
                Corner::BottomRight,
                Corner::BottomLeft,
            ]
            .into_iter()
            .min_by_key(|c| {
                let (x, y) = at(*c);
                self.covered(x, y, w, h)
            })
            .unwrap_or(Corner::TopRight),
            c => c,
        };
        let (x, y) = at(corner);
        let _ = writeln!(
            s,
            r##"<rect x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" fill="#ffffff" fill-opacity="0.9" stroke="#bbbbbb"/>"##
        );
        for (i, series) in named.iter().enumerate() {
            let cy = y + 15.0 + i as f64 * 18.0;
            let c = series.color;
            match &series.shape {
                Shape::Line(_, dash) | Shape::VLine(_, dash) => {
                    let _ = writeln!(
                        s,
                        r#"<line x1="{:.1}" y1="{cy:.1}" x2="{:.1}" y2="{cy:.1}" stroke="{c}" stroke-width="2"{}/>"#,
                        x + 6.0,
                        x + 30.0,
                        dash.attr()
                    );
                }
                Shape::Points(_) => {
                    let _ = writeln!(
                        s,
                        r#"<circle cx="{:.1}" cy="{cy:.1}" r="4.5" fill="{c}"/>"#,
                        x + 18.0
                    );
                }
                Shape::Histogram(..) => {
                    let _ = writeln!(
                        s,
                        r#"<rect x="{:.1}" y="{:.1}" width="24" height="10" fill="{c}" fill-opacity="0.35" stroke="{c}"/>"#,
                        x + 6.0,
                        cy - 5.0
                    );
                }
            }
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}">{}</text>"#,
                x + 36.0,
                cy + 4.0,
                escape(series.name.as_deref().unwrap_or(""))
            );
        }
    }
}

impl Chart {
    /// Drawn points (line vertices, markers, bar tops) inside a box, in pixels.
    fn covered(&self, x: f64, y: f64, w: f64, h: f64) -> usize {
        let inside = |(px, py): (f64, f64)| px >= x && px <= x + w && py >= y && py <= y + h;
        self.series
            .iter()
            .map(|s| match &s.shape {
                Shape::Line(pts, _) | Shape::Points(pts) => pts
                    .iter()
                    .filter(|(a, b)| inside((self.px(*a), self.py(*b))))
                    .count(),
                Shape::Histogram(edges, heights) => heights
                    .iter()
                    .zip(edges)
                    .filter(|(hgt, e)| **hgt > 0.0 && inside((self.px(**e), self.py(**hgt))))
                    .count(),
                Shape::VLine(..) => 0,
            })
            .sum()
    }
}

/// Counts of `values` in `bins` equal bins over `[lo, hi]` (values outside are clamped into the
/// end bins; non-finite values are skipped), and the bin edges.
pub fn histogram(
    values: impl Iterator<Item = f64>,
    lo: f64,
    hi: f64,
    bins: usize,
) -> (Vec<f64>, Vec<f64>) {
    let bins = bins.max(1);
    let width = (hi - lo) / bins as f64;
    let edges: Vec<f64> = (0..=bins).map(|i| lo + i as f64 * width).collect();
    let mut counts = vec![0.0; bins];
    for v in values.filter(|v| v.is_finite()) {
        let i = (((v - lo) / width).floor().max(0.0) as usize).min(bins - 1);
        counts[i] += 1.0;
    }
    (edges, counts)
}

/// Drop points that move less than `dx` and `dy` from the last kept one (the last is kept).
fn simplify(points: &[(f64, f64)], dx: f64, dy: f64) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = Vec::with_capacity(points.len().min(2048));
    for (i, &(x, y)) in points.iter().enumerate() {
        if !(x.is_finite() && y.is_finite()) {
            continue;
        }
        let keep = match out.last() {
            None => true,
            Some(&(lx, ly)) => (x - lx).abs() >= dx || (y - ly).abs() >= dy,
        };
        if keep || i + 1 == points.len() {
            out.push((x, y));
        }
    }
    out
}

/// Round tick positions: steps of 1, 2 or 5 × 10ⁿ, about six of them.
fn ticks(lo: f64, hi: f64) -> Vec<f64> {
    let step = tick_step(lo, hi);
    let first = (lo / step).ceil() as i64;
    let last = (hi / step + 1e-9).floor() as i64;
    (first..=last).map(|i| i as f64 * step).collect()
}

fn tick_step(lo: f64, hi: f64) -> f64 {
    let raw = (hi - lo) / 6.0;
    let mag = 10f64.powf(raw.log10().floor());
    let norm = raw / mag;
    let nice = if norm < 1.5 {
        1.0
    } else if norm < 3.5 {
        2.0
    } else if norm < 7.5 {
        5.0
    } else {
        10.0
    };
    nice * mag
}

fn tick_label(t: f64, (lo, hi): (f64, f64)) -> String {
    let step = tick_step(lo, hi);
    let decimals = (-step.log10().floor()).max(0.0) as usize;
    let t = if t.abs() < step * 1e-6 { 0.0 } else { t };
    format!("{t:.decimals$}")
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round() {
        assert_eq!(
            ticks(0.0, 1.0),
            vec![0.0, 0.2, 0.4, 0.6000000000000001, 0.8, 1.0]
        );
        assert_eq!(tick_label(0.6000000000000001, (0.0, 1.0)), "0.6");
        assert_eq!(
            ticks(0.0, 30.0),
            vec![0.0, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0]
        );
        assert_eq!(tick_label(25.0, (0.0, 30.0)), "25");
    }

    #[test]
    fn histogram_bins_and_clamps() {
        let (edges, counts) = histogram(
            [0.0, 0.1, 0.49, 0.5, 1.0, 7.0, f64::NEG_INFINITY].into_iter(),
            0.0,
            1.0,
            2,
        );
        assert_eq!(edges, vec![0.0, 0.5, 1.0]);
        assert_eq!(counts, vec![3.0, 3.0]);
    }

    #[test]
    fn svg_is_well_formed_and_escaped() {
        let mut c = Chart::new("ROC <all>", "FPR", "TPR", (0.0, 1.0), (0.0, 1.0));
        c.line(
            Some("a & b"),
            PALETTE[0],
            Dash::Solid,
            &[(0.0, 0.0), (0.5, 0.9), (1.0, 1.0)],
        );
        c.vline(None, PALETTE[1], Dash::Dashed, 0.3);
        c.histogram(Some("pos"), PALETTE[2], &[0.0, 0.5, 1.0], &[0.2, 0.4]);
        let svg = c.to_svg();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("ROC &lt;all&gt;") && svg.contains("a &amp; b"));
        assert!(svg.contains("<polyline") && svg.contains("<rect"));
    }

    #[test]
    fn categories_replace_numeric_ticks() {
        let mut c = Chart::new("bars", "kind", "rate", (-0.5, 1.5), (0.0, 1.0))
            .categories(vec!["same_error".into(), "a & b".into()]);
        c.histogram(
            Some("recall"),
            PALETTE[0],
            &[-0.3, 0.3, 0.7, 1.3],
            &[0.5, 0.0, 1.0],
        );
        let svg = c.to_svg();
        assert!(svg.contains(">same_error</text>") && svg.contains(">a &amp; b</text>"));
        // No numeric x tick labels such as "0.5" under the axis.
        assert!(!svg.contains(">0.5</text>"), "{svg}");
        // Two bars (a zero height draws nothing) and the legend's swatch.
        assert_eq!(svg.matches(r#"fill-opacity="0.35""#).count(), 3, "{svg}");
    }

    #[test]
    fn the_legend_avoids_the_data() {
        // A curve hugging the top edge: the legend goes to a bottom corner.
        let pts: Vec<(f64, f64)> = (0..=100).map(|i| (i as f64 / 100.0, 0.95)).collect();
        let mut c = Chart::new("t", "x", "y", (0.0, 1.0), (0.0, 1.0)).legend(Corner::Auto);
        c.line(Some("a"), PALETTE[0], Dash::Solid, &pts);
        let svg = c.to_svg();
        let legend_y: f64 = svg
            .lines()
            .find(|l| l.contains(r#"fill-opacity="0.9""#))
            .and_then(|l| l.split("y=\"").nth(1))
            .and_then(|r| r.split('"').next())
            .and_then(|v| v.parse().ok())
            .expect("a legend box");
        assert!(legend_y > HEIGHT / 2.0, "legend at y {legend_y}");
    }

    #[test]
    fn long_curves_are_thinned() {
        let pts: Vec<(f64, f64)> = (0..10_000).map(|i| (i as f64 / 10_000.0, 0.5)).collect();
        let kept = simplify(&pts, 1.0 / 1500.0, 1.0 / 1000.0);
        assert!(kept.len() < 1600 && kept.len() > 1000, "{}", kept.len());
        assert_eq!(*kept.last().unwrap(), *pts.last().unwrap());
    }
}
