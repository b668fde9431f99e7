//! Argument and environment parsing shared by the measurement examples, included with `#[path]`;
//! not an example itself (no `main`). A value that is given but does not parse, or a size that
//! overflows, is an `Error::InvalidArgument` naming it: never a silent default or a dropped entry.
#![allow(dead_code)] // each example uses a few of these

use std::str::FromStr;
use vkhost::{Error, Result};

fn invalid(what: &str, text: &str, expected: &str) -> Error {
    Error::InvalidArgument { reason: format!("{what}: expected {expected}, got {text:?}") }
}

fn parse<T: FromStr>(what: &str, text: &str) -> Result<T> {
    text.trim().parse().map_err(|_| invalid(what, text, &format!("a {}", std::any::type_name::<T>())))
}

/// Positional argument `i` (1-based), `None` when there are fewer arguments; text that is not
/// UTF-8 is an error (where `std::env::args` would panic).
fn positional(i: usize) -> Result<Option<String>> {
    match std::env::args_os().nth(i) {
        None => Ok(None),
        Some(raw) => raw.into_string().map(Some).map_err(|raw| invalid(&format!("argument {i}"), &raw.to_string_lossy(), "UTF-8 text")),
    }
}

/// Positional argument `i` (1-based) as a `T`, or `default` when there are fewer arguments.
pub fn arg<T: FromStr>(i: usize, default: T) -> Result<T> {
    match positional(i)? {
        Some(text) => parse(&format!("argument {i}"), &text),
        None => Ok(default),
    }
}

/// Positional argument `i` as a size in units of `1 << shift` bytes, `default` units when absent,
/// raised to at least `min` units: `(units, bytes)`.
pub fn size_arg(i: usize, shift: u32, default: usize, min: usize) -> Result<(usize, usize)> {
    let units = arg(i, default)?.max(min);
    Ok((units, bytes(&format!("argument {i}"), units, shift)?))
}

/// Environment variable `key` as a `T`, or `None` when it is unset or empty.
pub fn env<T: FromStr>(key: &str) -> Result<Option<T>> {
    let text = var(key)?;
    if text.trim().is_empty() { Ok(None) } else { parse(key, &text).map(Some) }
}

/// Environment variable `key`, `""` when unset; text that is not UTF-8 is an error.
pub fn var(key: &str) -> Result<String> {
    match std::env::var(key) {
        Ok(text) => Ok(text),
        Err(std::env::VarError::NotPresent) => Ok(String::new()),
        Err(std::env::VarError::NotUnicode(raw)) => Err(invalid(key, &raw.to_string_lossy(), "UTF-8 text")),
    }
}

/// `text` (trimmed) when it is one of `choices`, else an error naming `what`.
fn one_of(what: &str, text: &str, choices: &[&str]) -> Result<String> {
    match choices.iter().find(|&&c| c == text.trim()) {
        Some(c) => Ok(c.to_string()),
        None => Err(invalid(what, text, &format!("one of {}", choices.join(", ")))),
    }
}

/// Environment variable `key` as one of `choices`, or `""` when it is unset or empty.
pub fn choice(key: &str, choices: &[&str]) -> Result<String> {
    let text = var(key)?;
    if text.trim().is_empty() { Ok(String::new()) } else { one_of(key, &text, choices) }
}

/// Positional argument `i` as one of `choices`, or `default` when there are fewer arguments.
pub fn arg_choice(i: usize, default: &str, choices: &[&str]) -> Result<String> {
    match positional(i)? {
        Some(text) => one_of(&format!("argument {i}"), &text, choices),
        None => Ok(default.to_string()),
    }
}

/// `count` units of `1 << shift` bytes, as bytes.
pub fn bytes(what: &str, count: usize, shift: u32) -> Result<usize> {
    count.checked_mul(1 << shift).ok_or_else(|| invalid(what, &count.to_string(), "a size that fits in usize"))
}

/// `base + extra` bytes, where `extra` is what `what` adds: an error naming `what` on overflow.
pub fn plus(what: &str, base: usize, extra: usize) -> Result<usize> {
    base.checked_add(extra).ok_or_else(|| invalid(what, &extra.to_string(), &format!("at most {} more bytes", usize::MAX - base)))
}

/// A comma-separated list of `T`s (empty text: an empty list).
pub fn list<T: FromStr>(what: &str, text: &str) -> Result<Vec<T>> {
    text.split(',').filter(|k| !k.trim().is_empty()).map(|k| parse(what, k)).collect()
}

/// Positional argument `i` as a comma-separated list of sizes in units of `1 << shift` bytes,
/// each at least one unit, returned in bytes; `default` (bytes) when absent.
pub fn sizes(i: usize, shift: u32, default: &[usize]) -> Result<Vec<usize>> {
    let Some(text) = positional(i)? else { return Ok(default.to_vec()) };
    let what = format!("argument {i}");
    let units: Vec<usize> = list(&what, &text)?;
    if units.is_empty() || units.contains(&0) {
        return Err(invalid(&what, &text, "sizes of at least 1, comma-separated"));
    }
    units.into_iter().map(|u| bytes(&what, u, shift)).collect()
}
