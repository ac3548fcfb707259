//! Suggestions for a mistyped name: the closest known one ("did you mean
//! owens?"), for unknown clusters, queues and projects.

/// The edit distance (insertions, deletions, substitutions) between two
/// names, compared ignoring case.
fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.to_lowercase().chars().collect();
    let b: Vec<char> = b.to_lowercase().chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let here = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != cb)).min(row[j] + 1).min(here + 1);
            prev = here;
        }
    }
    row[b.len()]
}

/// The known name closest to `name`, when it is close enough to be a typo:
/// at most a third of its characters apart (a name of one or two characters
/// only in case), and nearer than any other candidate.
pub fn closest<'a>(name: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = name.chars().count() / 3;
    let mut best: Option<(usize, &str)> = None;
    let mut tie = false;
    for k in known {
        let d = distance(name, k);
        if d > limit {
            continue;
        }
        match best {
            Some((b, _)) if d > b => {}
            Some((b, _)) if d == b => tie = true,
            _ => {
                best = Some((d, k));
                tie = false;
            }
        }
    }
    best.filter(|_| !tie).map(|(_, k)| k)
}

/// ` (did you mean X?)` when a known name is close to `name`, else nothing.
pub fn did_you_mean<'a>(name: &str, known: impl IntoIterator<Item = &'a str>) -> String {
    closest(name, known).map_or_else(String::new, |k| format!(" (did you mean {k}?)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typo_finds_its_name_and_a_stranger_finds_none() {
        let known = ["owens", "pitzer", "PAS1234", "PZS0708"];
        assert_eq!(closest("owen", known), Some("owens"));
        assert_eq!(closest("Pitzr", known), Some("pitzer"));
        assert_eq!(closest("PAS1243", known), Some("PAS1234"));
        assert_eq!(closest("pas1234", known), Some("PAS1234"));
        assert_eq!(closest("ascend", known), None);
        assert_eq!(closest("c9", ["c1"]), None, "two characters: only case");
        assert_eq!(closest("C1", ["c1"]), Some("c1"));
        assert_eq!(closest("abcd", ["abce", "abcf"]), None, "a tie suggests nothing");
        assert_eq!(did_you_mean("owns", known), " (did you mean owens?)");
        assert_eq!(did_you_mean("nowhere", known), "");
        assert_eq!(distance("kitten", "sitting"), 3);
    }
}
