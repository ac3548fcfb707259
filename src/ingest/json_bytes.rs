//! JSON structure at the byte level, for bodies that are not valid UTF-8:
//! only ASCII bytes (`"`, `\`, brackets, `:`, `,`) shape JSON, so a scanner
//! over bytes finds members and elements without decoding the text, and the
//! bytes a sender wrote can be kept exactly (the byte policy, [`super::decode`]).

use std::ops::Range;

fn ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\r' | b'\n') {
        i += 1;
    }
    i
}

/// `b[i]` opens a string: the index after its closing quote.
fn string_end(b: &[u8], mut i: usize) -> Option<usize> {
    i += 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

/// A value starting at `b[i]`: the index after it.
fn value_end(b: &[u8], i: usize) -> Option<usize> {
    match b.get(i)? {
        b'"' => string_end(b, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            while j < b.len() {
                match b[j] {
                    b'"' => {
                        j = string_end(b, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            None
        }
        _ => {
            let mut j = i;
            while j < b.len() && !matches!(b[j], b',' | b'}' | b']' | b' ' | b'\t' | b'\r' | b'\n') {
                j += 1;
            }
            (j > i).then_some(j)
        }
    }
}

/// The byte ranges of the elements of a top-level JSON array; `None` when
/// `b` is not one.
pub fn array_elements(b: &[u8]) -> Option<Vec<Range<usize>>> {
    let mut i = ws(b, 0);
    if b.get(i) != Some(&b'[') {
        return None;
    }
    i = ws(b, i + 1);
    let mut out = Vec::new();
    if b.get(i) == Some(&b']') {
        return (ws(b, i + 1) == b.len()).then_some(out);
    }
    loop {
        let end = value_end(b, i)?;
        out.push(i..end);
        i = ws(b, end);
        match b.get(i)? {
            b',' => i = ws(b, i + 1),
            b']' => return (ws(b, i + 1) == b.len()).then_some(out),
            _ => return None,
        }
    }
}

/// How many elements a top-level JSON array has, counting at most `limit`
/// (so a huge array costs no more than `limit` elements' scan); 0 when `b`
/// is not an array.
pub fn count_elements(b: &[u8], limit: usize) -> usize {
    let mut i = ws(b, 0);
    if b.get(i) != Some(&b'[') {
        return 0;
    }
    i = ws(b, i + 1);
    if b.get(i) == Some(&b']') {
        return 0;
    }
    let mut n = 0;
    while n < limit {
        let Some(end) = value_end(b, i) else { return n + 1 };
        n += 1;
        i = ws(b, end);
        match b.get(i) {
            Some(b',') => i = ws(b, i + 1),
            _ => return n,
        }
    }
    n
}

/// A top-level JSON object without the members named `keys` (their key,
/// value and one separating comma); `None` when `b` is not one.
pub fn without_members(b: &[u8], keys: &[&str]) -> Option<Vec<u8>> {
    let mut i = ws(b, 0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    let mut members: Vec<Range<usize>> = Vec::new();
    let mut dropped: Vec<bool> = Vec::new();
    i = ws(b, i + 1);
    let close;
    if b.get(i) == Some(&b'}') {
        close = i;
    } else {
        loop {
            if b.get(i) != Some(&b'"') {
                return None;
            }
            let key_end = string_end(b, i)?;
            let key = &b[i + 1..key_end - 1];
            let colon = ws(b, key_end);
            if b.get(colon) != Some(&b':') {
                return None;
            }
            let v = ws(b, colon + 1);
            let end = value_end(b, v)?;
            members.push(i..end);
            dropped.push(keys.iter().any(|k| k.as_bytes() == key));
            i = ws(b, end);
            match b.get(i)? {
                b',' => i = ws(b, i + 1),
                b'}' => {
                    close = i;
                    break;
                }
                _ => return None,
            }
        }
    }
    if ws(b, close + 1) != b.len() {
        return None;
    }
    let mut out = Vec::with_capacity(b.len());
    out.push(b'{');
    let mut first = true;
    for (m, drop) in members.iter().zip(&dropped) {
        if *drop {
            continue;
        }
        if !first {
            out.push(b',');
        }
        out.extend_from_slice(&b[m.clone()]);
        first = false;
    }
    out.push(b'}');
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_and_elements_are_found_without_decoding() {
        let body =
            b"{\"jobid\":4, \"job_name\":\"caf\xe9\",\"script\":\"#!/bin/sh\\n\\\"x\\\" {[\",\"n\":[1,{\"a\":\"}\"}]}";
        assert_eq!(
            without_members(body, &["script"]).unwrap(),
            b"{\"jobid\":4,\"job_name\":\"caf\xe9\",\"n\":[1,{\"a\":\"}\"}]}".to_vec()
        );
        assert_eq!(without_members(b" {} ", &["x"]).unwrap(), b"{}".to_vec());
        assert_eq!(without_members(b"{\"a\":1", &[]), None);
        assert_eq!(without_members(b"[1]", &[]), None);
        let arr = b"[ {\"a\":\"\xff,]\"} , 2,\"s\"]";
        let r = array_elements(arr).unwrap();
        let parts: Vec<&[u8]> = r.iter().map(|r| &arr[r.clone()]).collect();
        assert_eq!(parts, vec![&b"{\"a\":\"\xff,]\"}"[..], b"2", b"\"s\""]);
        assert_eq!(array_elements(b"[]").unwrap(), Vec::<Range<usize>>::new());
        assert_eq!(array_elements(b"[1,"), None);
        assert_eq!(array_elements(b"{}"), None);
    }
}
