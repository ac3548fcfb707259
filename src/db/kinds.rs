//! The domain's named kinds bound to SQL as `text` (and `text[]`), through
//! their one name mapping: `EntryKind`, `Metric`, `SourceFormat`,
//! `RecordKind`, `RejectKind`. A name the schema does not know fails to
//! decode (the CHECK constraints keep such names out).

use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use sqlx::postgres::{PgArgumentBuffer, PgHasArrayType, PgTypeInfo, PgValueRef};
use sqlx::{Decode, Encode, Postgres, Type};

use crate::domain::kinds::{EntryKind, SourceFormat};
use crate::domain::posting::{RecordKind, RejectKind};
use crate::domain::pricing::ChargingRules;
use crate::domain::units::Metric;

macro_rules! text_kind {
    ($($name:ident),*) => {
        $(
            impl Type<Postgres> for $name {
                fn type_info() -> PgTypeInfo {
                    <&str as Type<Postgres>>::type_info()
                }

                fn compatible(ty: &PgTypeInfo) -> bool {
                    <&str as Type<Postgres>>::compatible(ty)
                }
            }

            impl PgHasArrayType for $name {
                fn array_type_info() -> PgTypeInfo {
                    <&str as PgHasArrayType>::array_type_info()
                }
            }

            impl Encode<'_, Postgres> for $name {
                fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
                    <&str as Encode<Postgres>>::encode_by_ref(&self.as_str(), buf)
                }
            }

            impl<'r> Decode<'r, Postgres> for $name {
                fn decode(value: PgValueRef<'r>) -> Result<Self, BoxDynError> {
                    let s = <&str as Decode<Postgres>>::decode(value)?;
                    $name::parse(s).ok_or_else(|| format!("unknown {} {s:?}", stringify!($name)).into())
                }
            }
        )*
    };
}

text_kind!(EntryKind, Metric, SourceFormat, RecordKind, RejectKind);

/// The charging rules' version as `ledger_entry.charging_rules` (smallint).
impl Type<Postgres> for ChargingRules {
    fn type_info() -> PgTypeInfo {
        <i16 as Type<Postgres>>::type_info()
    }
}

impl PgHasArrayType for ChargingRules {
    fn array_type_info() -> PgTypeInfo {
        <i16 as PgHasArrayType>::array_type_info()
    }
}

impl Encode<'_, Postgres> for ChargingRules {
    fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        <i16 as Encode<Postgres>>::encode_by_ref(&self.number(), buf)
    }
}

impl<'r> Decode<'r, Postgres> for ChargingRules {
    fn decode(value: PgValueRef<'r>) -> Result<Self, BoxDynError> {
        let n = <i16 as Decode<Postgres>>::decode(value)?;
        ChargingRules::from_number(n).ok_or_else(|| format!("unknown charging rules version {n}").into())
    }
}
