//! blazesym's C API, exported as is (the `blaze_*` functions of blazesym-c),
//! and blazesym's demangler for the names jitprof reads from a file itself
//! (its own symbol-table reader, the fallback and `report`'s source): the C
//! API demangles only inside symbolization.
pub use blazesym_c::*;

use std::ffi::{c_char, CStr, CString};
use std::fmt::{self, Write};
use std::panic::catch_unwind;
use std::ptr::null_mut;

/// A name is a target's text: a demangled one longer than this is not made.
const MAX_DEMANGLED_BYTES: usize = 16384;

struct BoundedText(String);

impl Write for BoundedText {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        if self.0.len() + text.len() > MAX_DEMANGLED_BYTES {
            return Err(fmt::Error);
        }
        self.0.push_str(text);
        Ok(())
    }
}

/// As blazesym demangles a name of unknown language: Rust (legacy and v0,
/// without the hash), else C++ (Itanium).
fn demangled(name: &str) -> Option<String> {
    let mut text = BoundedText(String::new());
    if let Ok(rust) = rustc_demangle::try_demangle(name) {
        write!(text, "{rust:#}").ok()?;
        return Some(text.0);
    }
    let symbol = cpp_demangle::Symbol::new(name).ok()?;
    symbol
        .structured_demangle(&mut text, &cpp_demangle::DemangleOptions::default())
        .ok()?;
    Some(text.0)
}

/// The readable form of a mangled C++ or Rust name, to be freed with
/// `jitprof_demangle_free`; NULL when the name is not one (or is not UTF-8).
///
/// # Safety
/// `name` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn jitprof_demangle(name: *const c_char) -> *mut c_char {
    if name.is_null() {
        return null_mut();
    }
    let Ok(name) = CStr::from_ptr(name).to_str() else {
        return null_mut();
    };
    // A panic must not cross into the caller: a name that makes the
    // demangler panic stays mangled.
    match catch_unwind(|| demangled(name)) {
        Ok(Some(text)) => CString::new(text).map_or(null_mut(), CString::into_raw),
        _ => null_mut(),
    }
}

/// Frees what `jitprof_demangle` returned.
///
/// # Safety
/// `text` is NULL or a pointer `jitprof_demangle` returned, freed once.
#[no_mangle]
pub unsafe extern "C" fn jitprof_demangle_free(text: *mut c_char) {
    if !text.is_null() {
        drop(CString::from_raw(text));
    }
}
