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
}

pub async fn get(conn: &mut PgConnection, source: &str) -> Result<Option<Cursor>, sqlx::Error> {
    sqlx::query_as!(
        Cursor,
        "SELECT file, byte_offset, lines FROM follow_cursor WHERE source = $1",
        source
    )
    .fetch_optional(conn)
    .await
}

pub async fn set(conn: &mut PgConnection, source: &str, cursor: &Cursor) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO follow_cursor (source, file, byte_offset, lines) VALUES ($1, $2, $3, $4)
         ON CONFLICT (source) DO UPDATE
            SET file = EXCLUDED.file, byte_offset = EXCLUDED.byte_offset, lines = EXCLUDED.lines, updated_at = now()",
        source,
        cursor.file,
        cursor.byte_offset,
        cursor.lines
    )
    .execute(conn)
    .await?;
    Ok(())
}
