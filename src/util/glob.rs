//! Redis-compatible glob matching (the semantics of `stringmatchlen` in
//! Redis 7.0's `util.c`), used by KEYS, SCAN MATCH, PSUBSCRIBE and CONFIG GET.
//!
//! Supported syntax:
//! * `*` matches any sequence of bytes, `?` matches exactly one byte;
//! * `[abc]`, `[a-z]` (reversed ranges such as `[z-a]` work too), `[^...]`
//!   negation, and `\` escapes both outside and inside brackets;
//! * an unterminated `[` behaves exactly as in Redis: the class runs to the
//!   end of the pattern.
//!
//! Redis matches recursively and only avoids exponential blow-up thanks to a
//! "skip longer matches" guard.  Every token other than `*` consumes exactly
//! one byte, so the classic "remember only the most recent star" greedy
//! algorithm gives the same answers in O(pattern × string) time with no
//! recursion (deep patterns cannot overflow the stack) and no allocation.

/// Returns true when `string` matches the glob `pattern`.
///
/// `nocase` folds ASCII letters, like Redis's `tolower()` in the C locale.
/// Quirks kept on purpose for compatibility:
/// * an empty `string` only matches an empty pattern (`*` does not match
///   `""` in Redis; KEYS/SCAN special-case a lone `*` before matching);
/// * an escaped byte inside brackets (`[\A]`) is compared case-sensitively
///   even when `nocase` is set;
/// * bracket ranges compare bytes as signed `char`s, as Redis does on x86-64.
pub fn glob_match(pattern: &[u8], string: &[u8], nocase: bool) -> bool {
    if string.is_empty() {
        // Redis's main loop never runs for an empty string, so only an empty
        // pattern is accepted.
        return pattern.is_empty();
    }
    let mut p = 0;
    let mut s = 0;
    // Where to resume after the most recent `*`: (pattern index just past the
    // star run, string index the star currently stops at).
    let mut resume: Option<(usize, usize)> = None;
    while s < string.len() {
        match step(pattern, p, string[s], nocase) {
            Step::Star(after) => {
                if after == pattern.len() {
                    // A trailing star swallows the rest of the string.
                    return true;
                }
                resume = Some((after, s));
                p = after;
            }
            Step::Consumed(next) => {
                p = next;
                s += 1;
            }
            Step::Mismatch => match resume {
                // Only the latest star needs to grow: earlier stars could only
                // push the remaining fixed-width tokens further right, which
                // the latest star already covers.
                Some((after, star_pos)) => {
                    resume = Some((after, star_pos + 1));
                    p = after;
                    s = star_pos + 1;
                }
                None => return false,
            },
        }
    }
    // The string is exhausted: only stars may remain in the pattern.
    pattern[p.min(pattern.len())..].iter().all(|&b| b == b'*')
}

/// True when `pattern` has no glob metacharacters, so matching it is a plain
/// byte comparison (`glob_match(p, s, false) == (p == s)`).
pub fn is_literal(pattern: &[u8]) -> bool {
    !pattern
        .iter()
        .any(|b| matches!(b, b'*' | b'?' | b'[' | b'\\'))
}

/// Outcome of trying the pattern token at one position against one byte.
enum Step {
    /// A run of stars; the payload is the index just past the run.
    Star(usize),
    /// The token matched the byte; the payload is the next pattern index.
    Consumed(usize),
    /// The token did not match (or the pattern is exhausted).
    Mismatch,
}

/// Evaluates the token starting at `p` against the byte `c`.
fn step(pattern: &[u8], p: usize, c: u8, nocase: bool) -> Step {
    let Some(&tok) = pattern.get(p) else {
        return Step::Mismatch;
    };
    match tok {
        b'*' => {
            let run = pattern[p..].iter().take_while(|&&b| b == b'*').count();
            Step::Star(p + run)
        }
        b'?' => Step::Consumed(p + 1),
        b'[' => {
            let (matched, next) = match_class(pattern, p + 1, c, nocase);
            if matched {
                Step::Consumed(next)
            } else {
                Step::Mismatch
            }
        }
        b'\\' if pattern.len() - p >= 2 => literal(pattern[p + 1], c, nocase, p + 2),
        // A trailing lone backslash is matched literally, as in Redis.
        _ => literal(tok, c, nocase, p + 1),
    }
}

fn literal(tok: u8, c: u8, nocase: bool, next: usize) -> Step {
    if bytes_eq(tok, c, nocase) {
        Step::Consumed(next)
    } else {
        Step::Mismatch
    }
}

fn bytes_eq(a: u8, b: u8, nocase: bool) -> bool {
    if nocase {
        a.eq_ignore_ascii_case(&b)
    } else {
        a == b
    }
}

/// Walks a bracket class whose body starts at `i` (just past `[`), exactly the
/// way Redis does, and returns whether `c` is accepted plus the index of the
/// token that follows the class.
fn match_class(pattern: &[u8], mut i: usize, c: u8, nocase: bool) -> (bool, usize) {
    let len = pattern.len();
    let negate = pattern.get(i) == Some(&b'^');
    if negate {
        i += 1;
    }
    let mut matched = false;
    loop {
        let Some(&b) = pattern.get(i) else {
            // Unterminated class: it extends to the end of the pattern.
            return (matched != negate, len);
        };
        if b == b'\\' && len - i >= 2 {
            i += 1;
            // Redis compares escaped class members case-sensitively.
            matched |= pattern[i] == c;
        } else if b == b']' {
            return (matched != negate, i + 1);
        } else if len - i >= 3 && pattern[i + 1] == b'-' {
            matched |= in_range(b, pattern[i + 2], c, nocase);
            i += 2;
        } else {
            matched |= bytes_eq(b, c, nocase);
        }
        i += 1;
    }
}

/// Range test with Redis's signed-`char` ordering (x86-64 builds) so that
/// ranges touching bytes >= 0x80 behave identically.
fn in_range(start: u8, end: u8, c: u8, nocase: bool) -> bool {
    let mut lo = signed(start);
    let mut hi = signed(end);
    let mut v = signed(c);
    if lo > hi {
        std::mem::swap(&mut lo, &mut hi);
    }
    if nocase {
        lo = c_tolower(lo);
        hi = c_tolower(hi);
        v = c_tolower(v);
    }
    lo <= v && v <= hi
}

fn signed(b: u8) -> i32 {
    i32::from(b as i8)
}

/// `tolower()` in the C locale: only ASCII capitals change.
fn c_tolower(v: i32) -> i32 {
    if (i32::from(b'A')..=i32::from(b'Z')).contains(&v) {
        v + 32
    } else {
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::{Duration, Instant};

    fn m(p: &str, s: &str) -> bool {
        glob_match(p.as_bytes(), s.as_bytes(), false)
    }

    fn mi(p: &str, s: &str) -> bool {
        glob_match(p.as_bytes(), s.as_bytes(), true)
    }

    #[test]
    fn stars_and_questions() {
        assert!(m("*", "anything"));
        assert!(m("h?llo", "hello"));
        assert!(m("h*llo", "heeeello"));
        assert!(m("h*llo", "hllo"));
        assert!(!m("h?llo", "hllo"));
        assert!(m("a*b*c", "axxbyyc"));
        assert!(!m("a*b*c", "axxbyy"));
        assert!(m("**a**", "xxa"));
        assert!(m("a*", "a"));
        assert!(m("abc", "abc"));
        assert!(!m("abc", "abcd"));
        assert!(!m("abcd", "abc"));
    }

    #[test]
    fn empty_string_quirk() {
        assert!(m("", ""));
        assert!(!m("*", ""));
        assert!(!m("", "a"));
    }

    #[test]
    fn classes() {
        assert!(m("h[ae]llo", "hallo"));
        assert!(!m("h[ae]llo", "hillo"));
        assert!(m("h[^e]llo", "hallo"));
        assert!(!m("h[^e]llo", "hello"));
        assert!(m("h[a-b]llo", "hbllo"));
        assert!(m("h[b-a]llo", "hallo"), "reversed range");
        assert!(!m("h[a-b]llo", "hcllo"));
        assert!(m("[\\]]", "]"));
        assert!(m("[\\-]", "-"));
        assert!(m("[a-]", "_"), "range a..']' as Redis parses it");
    }

    #[test]
    fn unterminated_class() {
        assert!(m("[ab", "a"));
        assert!(m("[ab", "b"));
        assert!(!m("[ab", "c"));
        assert!(!m("[", "a"));
        assert!(m("[^", "x"));
        assert!(!m("a[", "a"));
        assert!(m("[\\", "\\"));
    }

    #[test]
    fn escapes() {
        assert!(m("\\*", "*"));
        assert!(!m("\\*", "a"));
        assert!(m("a\\?b", "a?b"));
        assert!(m("a\\", "a\\"), "trailing backslash is literal");
    }

    #[test]
    fn nocase() {
        assert!(mi("HeLLo", "hello"));
        assert!(mi("h[A-Z]llo", "hello"));
        assert!(mi("[^A]", "b"));
        assert!(!mi("[^A]", "a"));
        assert!(
            !mi("[\\A]", "a"),
            "escaped class member stays case-sensitive"
        );
        assert!(mi("*MAX*", "maxmemory"));
    }

    #[test]
    fn signed_ranges() {
        // 0xff is -1 as a signed char, so [a-\xff] spans -1..='a'.
        assert!(glob_match(b"[a-\xff]", b"0", false));
        assert!(!glob_match(b"[a-\xff]", b"b", false));
        assert!(glob_match(b"[\x80-\x90]", b"\x85", false));
    }

    #[test]
    fn literal_detection() {
        assert!(is_literal(b"foo:bar]^-"));
        assert!(is_literal(b""));
        assert!(!is_literal(b"foo*"));
        assert!(!is_literal(b"fo?"));
        assert!(!is_literal(b"f[o]"));
        assert!(!is_literal(b"f\\o"));
    }

    #[test]
    fn pathological_patterns_are_fast() {
        let s = vec![b'a'; 1000];
        let start = Instant::now();
        let stars = vec![b'*'; 30];
        assert!(glob_match(&stars, &s, false));
        let mut p = b"a*".repeat(30);
        p.push(b'b');
        assert!(!glob_match(&p, &s, false));
        let mut p2 = b"*a".repeat(30);
        p2.extend_from_slice(b"*b");
        assert!(!glob_match(&p2, &s, false));
        let deep = b"a*".repeat(100_000);
        assert!(!glob_match(&deep, b"aaa", false));
        assert!(start.elapsed() < Duration::from_secs(2));
    }

    /// Straight transliteration of Redis's recursive `stringmatchlen_impl`
    /// (without its skip guard); bytes past the end read as the C string
    /// terminator.
    fn reference(p: &[u8], s: &[u8], nocase: bool) -> bool {
        let at = |i: usize| p.get(i).copied().unwrap_or(0);
        let (mut pi, mut si) = (0usize, 0usize);
        while pi < p.len() && si < s.len() {
            match p[pi] {
                b'*' => {
                    while at(pi + 1) == b'*' {
                        pi += 1;
                    }
                    if p.len() - pi == 1 {
                        return true;
                    }
                    while si < s.len() {
                        if reference(&p[pi + 1..], &s[si..], nocase) {
                            return true;
                        }
                        si += 1;
                    }
                    return false;
                }
                b'?' => si += 1,
                b'[' => {
                    pi += 1;
                    let not = at(pi) == b'^';
                    if not {
                        pi += 1;
                    }
                    let mut matched = false;
                    loop {
                        let rem = p.len() - pi;
                        if at(pi) == b'\\' && rem >= 2 {
                            pi += 1;
                            if p[pi] == s[si] {
                                matched = true;
                            }
                        } else if at(pi) == b']' {
                            break;
                        } else if rem == 0 {
                            pi -= 1;
                            break;
                        } else if rem >= 3 && p[pi + 1] == b'-' {
                            let (mut a, mut b) = (ref_char(p[pi]), ref_char(p[pi + 2]));
                            let mut c = ref_char(s[si]);
                            if a > b {
                                std::mem::swap(&mut a, &mut b);
                            }
                            if nocase {
                                a = ref_tolower(a);
                                b = ref_tolower(b);
                                c = ref_tolower(c);
                            }
                            pi += 2;
                            if c >= a && c <= b {
                                matched = true;
                            }
                        } else if ref_eq(p[pi], s[si], nocase) {
                            matched = true;
                        }
                        pi += 1;
                    }
                    if not {
                        matched = !matched;
                    }
                    if !matched {
                        return false;
                    }
                    si += 1;
                }
                other => {
                    let mut lit = other;
                    if other == b'\\' && p.len() - pi >= 2 {
                        pi += 1;
                        lit = p[pi];
                    }
                    if !ref_eq(lit, s[si], nocase) {
                        return false;
                    }
                    si += 1;
                }
            }
            pi += 1;
            if si == s.len() {
                while at(pi) == b'*' {
                    pi += 1;
                }
                break;
            }
        }
        pi == p.len() && si == s.len()
    }

    // The reference's helpers are written independently of the code under
    // test so that a bug in one is not mirrored in the other.
    fn ref_char(b: u8) -> i32 {
        // x86-64 `char` is signed: bytes >= 0x80 are negative.
        if b >= 0x80 {
            i32::from(b) - 256
        } else {
            i32::from(b)
        }
    }

    fn ref_tolower(v: i32) -> i32 {
        if (65..=90).contains(&v) {
            v + 32
        } else {
            v
        }
    }

    fn ref_eq(a: u8, b: u8, nocase: bool) -> bool {
        let low = |x: u8| if x.is_ascii_uppercase() { x + 32 } else { x };
        if nocase {
            low(a) == low(b)
        } else {
            a == b
        }
    }

    fn pattern_byte() -> impl Strategy<Value = u8> {
        prop::sample::select(b"ab*?[]^-\\Az\xff\x80".to_vec())
    }

    /// Patterns built from meaningful fragments, so that escapes inside
    /// classes, ranges and negations are hit far more often than with
    /// random bytes.
    fn pattern_chunks() -> impl Strategy<Value = Vec<u8>> {
        let chunks: Vec<&'static [u8]> = vec![
            b"a",
            b"A",
            b"b",
            b"*",
            b"?",
            b"[",
            b"]",
            b"\\",
            b"[\\A]",
            b"[\\a",
            b"[^a]",
            b"[a-",
            b"[Z-a]",
            b"[a-z]",
            b"[z-a]",
            b"[^",
            b"\\*",
            b"[a-\xff]",
            b"\xff",
        ];
        prop::collection::vec(prop::sample::select(chunks), 0..5).prop_map(|parts| parts.concat())
    }

    fn string_byte() -> impl Strategy<Value = u8> {
        prop::sample::select(b"abAzB]^-\\*[_\xff\x85".to_vec())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20_000))]
        #[test]
        fn matches_reference_model(
            p in prop::collection::vec(pattern_byte(), 0..9),
            s in prop::collection::vec(string_byte(), 0..9),
            nocase in any::<bool>(),
        ) {
            prop_assert_eq!(glob_match(&p, &s, nocase), reference(&p, &s, nocase));
        }

        #[test]
        fn matches_reference_model_structured(
            p in pattern_chunks(),
            s in prop::collection::vec(string_byte(), 0..5),
            nocase in any::<bool>(),
        ) {
            prop_assert_eq!(glob_match(&p, &s, nocase), reference(&p, &s, nocase));
        }

        #[test]
        fn literal_patterns_compare_bytes(
            p in prop::collection::vec(string_byte(), 0..6),
            s in prop::collection::vec(string_byte(), 0..6),
        ) {
            if is_literal(&p) {
                prop_assert_eq!(glob_match(&p, &s, false), p == s);
            }
        }
    }
}
