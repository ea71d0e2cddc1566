//! The encoding the journal's records and the database's chunks share: length-prefixed
//! strings, little-endian numbers, and a reader of them. A leaf: the journal and the chunks
//! both use it, and neither the other for it.

/// Appends `text` with its length (`u32`, little-endian) first.
pub(crate) fn put_str(out: &mut Vec<u8>, text: &str) {
    out.extend_from_slice(&(text.len() as u32).to_le_bytes());
    out.extend_from_slice(text.as_bytes());
}

/// Reads a journal record's body or a database chunk's.
pub(crate) struct Decoder<'a> {
    pub(crate) bytes: &'a [u8],
}

impl<'a> Decoder<'a> {
    pub(crate) fn take(&mut self, count: usize) -> Result<&'a [u8], String> {
        if self.bytes.len() < count {
            return Err(format!("{count} bytes wanted, {} left", self.bytes.len()));
        }
        let (taken, rest) = self.bytes.split_at(count);
        self.bytes = rest;
        Ok(taken)
    }

    pub(crate) fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().map_err(|_| "short u32")?))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().map_err(|_| "short u64")?))
    }

    pub(crate) fn string(&mut self) -> Result<String, String> {
        String::from_utf8(self.sized()?.to_vec()).map_err(|error| error.to_string())
    }

    /// A string that is most often one of a few words (an event's `dir`, `kind`).
    pub(crate) fn word(&mut self) -> Result<std::borrow::Cow<'static, str>, String> {
        let bytes = self.sized()?;
        std::str::from_utf8(bytes).map(crate::word).map_err(|error| error.to_string())
    }

    /// A `u32` length and that many bytes.
    pub(crate) fn sized(&mut self) -> Result<&'a [u8], String> {
        let length = self.u32()? as usize;
        self.take(length)
    }
}
