//! Text the standard fonts cannot show: a name such as "Jiří Dvořák",
//! "Łukasz", "Иванов" or "Δημήτρης" has letters outside WinAnsi, which
//! printed as `?` in Helvetica. Such letters are shown in DejaVu Sans
//! (regular and bold, `src/document/fonts/`, the Bitstream Vera license),
//! embedded as a CID font subset to the glyphs the document uses
//! (compressed), with a ToUnicode map so the text can be searched and
//! copied, and measured with the font's own widths. Text WinAnsi can encode
//! stays in Helvetica, so a statement without such letters is the document
//! it was, with nothing embedded. DejaVu Sans has the Latin, Greek,
//! Cyrillic, Armenian and Georgian letters; what it has not (Chinese,
//! Japanese, Korean, the Indic scripts, Thai, most emoji) still prints as
//! `?`, and so do right-to-left scripts (Hebrew, Arabic), which would need
//! reordering and, for Arabic, joining, and control characters.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use pdf_writer::types::{CidFontType, FontFlags, SystemInfo};
use pdf_writer::writers::WMode;
use pdf_writer::{Content, Finish, Name, Pdf, Rect, Ref, Str};

use super::win_ansi;

static SANS: &[u8] = include_bytes!("../fonts/DejaVuSans.ttf");
static SANS_BOLD: &[u8] = include_bytes!("../fonts/DejaVuSans-Bold.ttf");
static SANS_FACE: LazyLock<ttf_parser::Face<'static>> =
    LazyLock::new(|| ttf_parser::Face::parse(SANS, 0).expect("the embedded font parses"));
static SANS_BOLD_FACE: LazyLock<ttf_parser::Face<'static>> =
    LazyLock::new(|| ttf_parser::Face::parse(SANS_BOLD, 0).expect("the embedded font parses"));

fn face(bold: bool) -> &'static ttf_parser::Face<'static> {
    if bold { &SANS_BOLD_FACE } else { &SANS_FACE }
}

/// Whether `c` is of a script written right to left (Hebrew, Arabic,
/// Syriac, Thaana, N'Ko and their presentation forms): not shown, since
/// glyphs are drawn left to right in the order written.
fn right_to_left(c: char) -> bool {
    matches!(c as u32, 0x0590..=0x08FF | 0xFB1D..=0xFDFF | 0xFE70..=0xFEFF | 0x10800..=0x10FFF | 0x1E800..=0x1EFFF)
}

/// Whether the fallback font shows `c` (a character WinAnsi has not).
fn shows(c: char, bold: bool) -> bool {
    !c.is_control() && !right_to_left(c) && face(bold).glyph_index(c).is_some_and(|g| g.0 != 0)
}

/// The width of `c` in the fallback font, per 1000 em, if it shows it.
pub(super) fn advance(c: char, bold: bool) -> Option<f32> {
    if !shows(c, bold) {
        return None;
    }
    let f = face(bold);
    let glyph = f.glyph_index(c)?;
    Some(f32::from(f.glyph_hor_advance(glyph)?) * 1000.0 / f32::from(f.units_per_em()))
}

/// The resource names of the two fallback fonts on each page.
pub(super) const UNICODE: Name<'static> = Name(b"U1");
pub(super) const UNICODE_BOLD: Name<'static> = Name(b"U2");

const SYSTEM_INFO: SystemInfo = SystemInfo {
    registry: Str(b"Adobe"),
    ordering: Str(b"Identity"),
    supplement: 0,
};

/// One embedded font: the glyphs used so far, numbered as the subset
/// will number them (their CIDs).
struct Embedded {
    data: &'static [u8],
    face: &'static ttf_parser::Face<'static>,
    remapper: subsetter::GlyphRemapper,
    /// CID -> (the font's own glyph id, the character it shows).
    used: BTreeMap<u16, (u16, char)>,
}

impl Embedded {
    fn new(bold: bool) -> Embedded {
        Embedded {
            data: if bold { SANS_BOLD } else { SANS },
            face: face(bold),
            remapper: subsetter::GlyphRemapper::new(),
            used: BTreeMap::new(),
        }
    }

    /// `s` as two-byte CIDs (Identity-H); every character is one the font has.
    fn encode(&mut self, s: &str) -> Vec<u8> {
        let mut out = Vec::with_capacity(2 * s.len());
        for c in s.chars() {
            let glyph = self.face.glyph_index(c).map_or(0, |g| g.0);
            let cid = self.remapper.remap(glyph);
            self.used.entry(cid).or_insert((glyph, c));
            out.extend_from_slice(&cid.to_be_bytes());
        }
        out
    }

    /// Write the font (Type0 over a CIDFontType2, its descriptor, the
    /// subset font program and its ToUnicode map) at `ids`.
    fn write(&self, pdf: &mut Pdf, ids: [Ref; 5], name: &str) {
        let [type0, cid_font, descriptor, to_unicode, program] = ids;
        // A subset's name starts with a tag of six capital letters, made
        // from the glyphs it holds (PDF 32000-1, 9.6.4).
        let tag: String = {
            let mut h: u32 = 2_166_136_261;
            for (&cid, &(glyph, _)) in &self.used {
                for b in cid.to_be_bytes().into_iter().chain(glyph.to_be_bytes()) {
                    h = (h ^ u32::from(b)).wrapping_mul(16_777_619);
                }
            }
            (0..6).map(|i| char::from(b'A' + ((h >> (i * 5)) % 26) as u8)).collect()
        };
        let base = format!("{tag}+{name}");
        let base = Name(base.as_bytes());
        let em = f32::from(self.face.units_per_em());
        let scale = |v: i16| f32::from(v) * 1000.0 / em;

        pdf.type0_font(type0)
            .base_font(base)
            .encoding_predefined(Name(b"Identity-H"))
            .descendant_font(cid_font)
            .to_unicode(to_unicode);

        let mut cid = pdf.cid_font(cid_font);
        cid.subtype(CidFontType::Type2)
            .base_font(base)
            .system_info(SYSTEM_INFO)
            .font_descriptor(descriptor)
            .default_width(0.0)
            .cid_to_gid_map_predefined(Name(b"Identity"));
        let mut widths = cid.widths();
        for (&c, &(glyph, _)) in &self.used {
            let advance = self.face.glyph_hor_advance(ttf_parser::GlyphId(glyph)).unwrap_or(0);
            widths.consecutive(c, [f32::from(advance) * 1000.0 / em]);
        }
        widths.finish();
        cid.finish();

        let b = self.face.global_bounding_box();
        pdf.font_descriptor(descriptor)
            .name(base)
            .flags(FontFlags::NON_SYMBOLIC)
            .bbox(Rect::new(
                scale(b.x_min),
                scale(b.y_min),
                scale(b.x_max),
                scale(b.y_max),
            ))
            .italic_angle(0.0)
            .ascent(scale(self.face.ascender()))
            .descent(scale(self.face.descender()))
            .cap_height(scale(self.face.capital_height().unwrap_or_else(|| {
                // DejaVu's OS/2 table is too old to give it: the top of H.
                self.face
                    .glyph_index('H')
                    .and_then(|g| self.face.glyph_bounding_box(g))
                    .map_or(self.face.ascender(), |b| b.y_max)
            })))
            .stem_v(80.0)
            .font_file2(program);

        let mut cmap = pdf_writer::types::UnicodeCmap::new(Name(b"Custom"), SYSTEM_INFO);
        for (&c, &(_, ch)) in &self.used {
            cmap.pair(c, ch);
        }
        pdf.cmap(to_unicode, &cmap.finish()).writing_mode(WMode::Horizontal);

        let subset = subsetter::subset(self.data, 0, &self.remapper).expect("the embedded font subsets");
        let deflated = miniz_oxide::deflate::compress_to_vec_zlib(&subset, 9);
        pdf.stream(program, &deflated)
            .filter(pdf_writer::Filter::FlateDecode)
            .pair(Name(b"Length1"), subset.len() as i32);
    }
}

/// The fallback fonts of one document, loaded when first needed.
#[derive(Default)]
pub(super) struct Fallback {
    regular: Option<Embedded>,
    bold: Option<Embedded>,
}

impl Fallback {
    fn font(&mut self, bold: bool) -> &mut Embedded {
        if bold {
            self.bold.get_or_insert_with(|| Embedded::new(true))
        } else {
            self.regular.get_or_insert_with(|| Embedded::new(false))
        }
    }

    /// Show `s` at the text position of `content` in `font` (a standard
    /// font's resource name): runs WinAnsi encodes in that font, runs of
    /// letters it cannot in DejaVu Sans (bold with bold), and a letter
    /// neither has as `?`.
    pub(super) fn show(&mut self, content: &mut Content, font: Name, bold: bool, size: f32, s: &str) {
        if s.chars().all(|c| super::win_ansi_byte(c).is_some()) {
            content.set_font(font, size).show(Str(&win_ansi(s)));
            return;
        }
        // Split into runs of one kind: WinAnsi (or a letter no font has,
        // shown as `?`), or the fallback font.
        let mut runs: Vec<(bool, String)> = Vec::new();
        for c in s.chars() {
            let fallback = super::win_ansi_byte(c).is_none() && shows(c, bold);
            match runs.last_mut() {
                Some((kind, run)) if *kind == fallback => run.push(c),
                _ => runs.push((fallback, c.to_string())),
            }
        }
        for (fallback, run) in runs {
            if fallback {
                let bytes = self.font(bold).encode(&run);
                let name = if bold { UNICODE_BOLD } else { UNICODE };
                content.set_font(name, size).show(Str(&bytes));
            } else {
                content.set_font(font, size).show(Str(&win_ansi(&run)));
            }
        }
    }

    /// Write the fonts used, from object `next` on; their resource names
    /// and ids, for each page's resources.
    pub(super) fn write(&self, pdf: &mut Pdf, next: i32) -> Vec<(Name<'static>, Ref)> {
        let mut out = Vec::new();
        let mut id = next;
        for (font, resource, name) in [
            (&self.regular, UNICODE, "DejaVuSans"),
            (&self.bold, UNICODE_BOLD, "DejaVuSans-Bold"),
        ] {
            let Some(font) = font.as_ref().filter(|f| !f.used.is_empty()) else {
                continue;
            };
            let ids = [0, 1, 2, 3, 4].map(|i| Ref::new(id + i));
            font.write(pdf, ids, name);
            out.push((resource, ids[0]));
            id += 5;
        }
        out
    }
}
