//! What the benches share: reading criterion's medians for the same-run
//! tables they print, and a runtime for the store benches.

#![allow(dead_code)] // each bench uses its own part

/// Criterion's median estimate, in nanoseconds, for the benchmark `id`
/// (`group/function/parameter`), once it has run.
pub(crate) fn median_ns(id: &str) -> Option<f64> {
    let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
    let path = format!("{target}/criterion/{id}/new/estimates.json");
    let text = std::fs::read_to_string(path).ok()?;
    let json: serde_json::Value = serde_json::from_str(&text).ok()?;
    json["median"]["point_estimate"].as_f64()
}

/// A multi-threaded tokio runtime with timers and I/O.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}
