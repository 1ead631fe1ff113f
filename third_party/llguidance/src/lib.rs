//! Re-exports llguidance so that its `extern "C"` API (llguidance.h) is in this static
//! library. specula calls it from src/grammar/ (C++).
pub use llguidance::ffi::*;
