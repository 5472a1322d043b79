//! blazesym's C API, exported as is (the `blaze_*` functions of blazesym-c).
pub use blazesym_c::*;
