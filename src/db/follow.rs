//! `follow_cursor`: where `import --follow` stopped in a directory of
//! accounting files.

use sqlx::PgConnection;

/// A followed directory's position: the file and the byte after the last
/// line recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    pub file: String,
    pub byte_offset: i64,
    /// Lines of `file` read so far (for `file:line` references).
    pub lines: i64,
    /// A digest of what was read of `file` before `byte_offset` (see
    /// `service::follow`), to tell the same file grown from another one
    /// put in its place. `None` at a file's start and in cursors saved
    /// before migration 0050.
    pub seen: Option<Vec<u8>>,
}

pub async fn get(conn: &mut PgConnection, source: &str) -> Result<Option<Cursor>, sqlx::Error> {
    sqlx::query_as!(
        Cursor,
        "SELECT file, byte_offset, lines, seen FROM follow_cursor WHERE source = $1",
        source
    )
    .fetch_optional(conn)
    .await
}

pub async fn set(conn: &mut PgConnection, source: &str, cursor: &Cursor) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO follow_cursor (source, file, byte_offset, lines, seen) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (source) DO UPDATE
            SET file = EXCLUDED.file, byte_offset = EXCLUDED.byte_offset, lines = EXCLUDED.lines,
                seen = EXCLUDED.seen, updated_at = now()",
        source,
        cursor.file,
        cursor.byte_offset,
        cursor.lines,
        cursor.seen.as_deref()
    )
    .execute(conn)
    .await?;
    Ok(())
}
