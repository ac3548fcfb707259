//! The kinds the ledger stores as text — what an entry is, where a record
//! came from — each declared with [`named!`], so each has exactly one name
//! mapping (`as_str` / `parse`, and serde through them). `db::kinds` binds
//! them to SQL.

/// An enum whose variants have fixed names: `as_str`, `parse`, `ALL`, and
/// serde as those names.
macro_rules! named {
    ($(#[$meta:meta])* pub enum $name:ident { $($(#[$vmeta:meta])* $variant:ident => $text:literal,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)*
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];

            /// The name stored in the database and shown to people.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)*
                }
            }

            pub fn parse(s: &str) -> Option<$name> {
                match s {
                    $($text => Some($name::$variant),)*
                    _ => None,
                }
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = <std::borrow::Cow<'de, str> as serde::Deserialize>::deserialize(d)?;
                $name::parse(&s).ok_or_else(|| {
                    let known: Vec<&str> = $name::ALL.iter().map(|k| k.as_str()).collect();
                    serde::de::Error::custom(format!("unknown {} {s:?} (one of {})", stringify!($name), known.join(", ")))
                })
            }
        }
    };
}
pub(crate) use named;

/// `Display` as the name.
macro_rules! display_as_name {
    ($($name:ident),*) => {
        $(impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        })*
    };
}

named! {
    /// What a ledger entry is.
    pub enum EntryKind {
        Job => "job",
        Storage => "storage",
        Reversal => "reversal",
        Refund => "refund",
        Adjustment => "adjustment",
        /// A discount of a job or storage charge (docs/rules.md R8).
        Discount => "discount",
    }
}

named! {
    /// Where a record came from: an import format, `serve`'s `/jobs`
    /// (`json`), or `job record` (`cli`, or `json` with `--json`).
    pub enum SourceFormat {
        Slurm => "slurm",
        Pbs => "pbs",
        Jsonl => "jsonl",
        Json => "json",
        Jobcomp => "jobcomp",
        Cli => "cli",
        SacctJson => "sacct-json",
        JobcompFiletxt => "jobcomp-filetxt",
    }
}

use super::posting::{RecordKind, RejectKind};
display_as_name!(EntryKind, SourceFormat, RecordKind, RejectKind);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_reads_back_as_its_kind() {
        for k in EntryKind::ALL {
            assert_eq!(EntryKind::parse(k.as_str()), Some(*k));
            assert_eq!(serde_json::to_string(k).unwrap(), format!("\"{k}\""));
            assert_eq!(serde_json::from_str::<EntryKind>(&format!("\"{k}\"")).unwrap(), *k);
        }
        for f in SourceFormat::ALL {
            assert_eq!(SourceFormat::parse(f.as_str()), Some(*f));
        }
        assert_eq!(SourceFormat::SacctJson.as_str(), "sacct-json");
        assert_eq!(EntryKind::parse("Job"), None);
        let e = serde_json::from_str::<EntryKind>("\"charge\"").unwrap_err().to_string();
        assert!(
            e.contains("unknown EntryKind \"charge\" (one of job, storage, reversal, refund, adjustment, discount)"),
            "{e}"
        );
    }
}
