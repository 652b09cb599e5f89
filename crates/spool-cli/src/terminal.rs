//! Text from outside (agent names, task types, states, errors, answers, schedule
//! fields: whatever a submitter or a model wrote) made safe to print on a terminal.
//!
//! A terminal obeys the control characters in what it is sent: `ESC ]0;…BEL` retitles
//! the window, `ESC [31m` changes colours, `ESC [2J` or a carriage return overwrites
//! what the operator reads. Every such character is printed visibly instead, as `\x`
//! and two lowercase hex digits: each C0 control (U+0000–U+001F, newline and tab
//! included), DEL (U+007F) and each C1 control (U+0080–U+009F). `ESC ]0;pwned BEL`
//! prints as `\x1b]0;pwned\x07`. Everything else, backslashes included, is printed as
//! it is.

use std::borrow::Cow;
use std::fmt::Write;

/// Whether `c` is a control character a terminal could act on.
fn is_control(c: char) -> bool {
    matches!(c, '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}')
}

/// `text` with each control character written as `\xHH` (see the module's docs);
/// borrowed when there is none.
pub(crate) fn safe(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if is_control(c) {
            let _ = write!(out, "\\x{:02x}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// `text` without its control characters: for a place whose layout is already fixed
/// (a cell of the `spool top` screen), where a visible escape would not fit.
#[cfg(any(test, feature = "top"))]
pub(crate) fn strip(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_control) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(text.chars().filter(|c| !is_control(*c)).collect())
}

#[cfg(test)]
mod tests {
    use super::{safe, strip};

    #[test]
    fn controls_are_written_visibly() {
        assert_eq!(
            safe("a\u{1b}]0;pwned\u{7}b\u{1b}[31mred\r\n\t\u{7f}\u{9b}é\\x"),
            "a\\x1b]0;pwned\\x07b\\x1b[31mred\\x0d\\x0a\\x09\\x7f\\x9bé\\x"
        );
    }

    #[test]
    fn text_without_controls_is_borrowed() {
        assert!(matches!(safe("agent-7 · ☃"), std::borrow::Cow::Borrowed(_)));
        assert!(matches!(strip("agent-7"), std::borrow::Cow::Borrowed(_)));
    }

    #[test]
    fn strip_drops_controls() {
        assert_eq!(strip("a\u{1b}[31mb\u{7}\u{85}c"), "a[31mbc");
    }
}
