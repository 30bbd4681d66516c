//! Netlink attribute (TLV) writing and reading for nfnetlink messages.
//!
//! Lengths are host-endian u16 and every attribute is padded to 4 bytes, as netlink requires.
//! nf_tables puts integers in network byte order (big-endian) unless a field says otherwise.

/// linux/netlink.h: the attribute holds attributes.
pub(crate) const NLA_F_NESTED: u16 = 1 << 15;

/// Appends attributes to a growing message buffer.
#[derive(Debug, Default, Clone)]
pub struct AttrWriter {
    pub buf: Vec<u8>,
}

fn pad4(len: usize) -> usize {
    (len + 3) & !3
}

impl AttrWriter {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn bytes(&mut self, kind: u16, value: &[u8]) -> &mut Self {
        let len = 4 + value.len();
        self.buf.extend_from_slice(&(len as u16).to_ne_bytes());
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        self.buf.extend_from_slice(value);
        self.buf.resize(self.buf.len() + pad4(len) - len, 0);
        self
    }

    /// An attribute whose value `f` appends to the buffer (no copy of the value is made).
    pub(crate) fn bytes_with(&mut self, kind: u16, f: impl FnOnce(&mut Vec<u8>)) -> &mut Self {
        let start = self.buf.len();
        self.buf.extend_from_slice(&[0, 0, 0, 0]);
        f(&mut self.buf);
        let len = self.buf.len() - start;
        self.buf[start..start + 2].copy_from_slice(&(len as u16).to_ne_bytes());
        self.buf[start + 2..start + 4].copy_from_slice(&kind.to_ne_bytes());
        self.buf.resize(start + pad4(len), 0);
        self
    }

    /// A NUL-terminated string, as the kernel's NLA_STRING policy expects.
    pub fn string(&mut self, kind: u16, value: &str) -> &mut Self {
        let mut v = Vec::with_capacity(value.len() + 1);
        v.extend_from_slice(value.as_bytes());
        v.push(0);
        self.bytes(kind, &v)
    }

    pub fn u8(&mut self, kind: u16, value: u8) -> &mut Self {
        self.bytes(kind, &[value])
    }

    /// Big-endian u32 (nf_tables' NLA_U32 convention).
    pub fn be32(&mut self, kind: u16, value: u32) -> &mut Self {
        self.bytes(kind, &value.to_be_bytes())
    }

    /// Big-endian u64 (handles, timeouts).
    pub(crate) fn be64(&mut self, kind: u16, value: u64) -> &mut Self {
        self.bytes(kind, &value.to_be_bytes())
    }

    /// A nested attribute whose payload is written by `f`.
    pub fn nested(&mut self, kind: u16, f: impl FnOnce(&mut AttrWriter)) -> &mut Self {
        let start = self.buf.len();
        self.buf.extend_from_slice(&[0, 0, 0, 0]);
        let mut inner = AttrWriter {
            buf: std::mem::take(&mut self.buf),
        };
        f(&mut inner);
        self.buf = inner.buf;
        let len = self.buf.len() - start;
        self.buf[start..start + 2].copy_from_slice(&(len as u16).to_ne_bytes());
        self.buf[start + 2..start + 4].copy_from_slice(&(kind | NLA_F_NESTED).to_ne_bytes());
        self
    }
}

/// Errors reading attributes: the kernel sent something we cannot parse.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AttrError {
    #[error("attribute header truncated at offset {0}")]
    Truncated(usize),
    #[error("attribute length {len} at offset {offset} overruns the buffer")]
    Overrun { offset: usize, len: usize },
    #[error("attribute {kind} has {len} bytes, expected {expected}")]
    BadLength {
        kind: u16,
        len: usize,
        expected: usize,
    },
    #[error("attribute {0} is not valid UTF-8")]
    NotUtf8(u16),
}

/// One attribute borrowed from a buffer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Attr<'a> {
    /// Type with the NESTED / NET_BYTEORDER flags stripped.
    pub(crate) kind: u16,
    pub(crate) value: &'a [u8],
}

impl<'a> Attr<'a> {
    pub(crate) fn be32(&self) -> Result<u32, AttrError> {
        let b: [u8; 4] = self.value.try_into().map_err(|_| AttrError::BadLength {
            kind: self.kind,
            len: self.value.len(),
            expected: 4,
        })?;
        Ok(u32::from_be_bytes(b))
    }

    pub(crate) fn be64(&self) -> Result<u64, AttrError> {
        let b: [u8; 8] = self.value.try_into().map_err(|_| AttrError::BadLength {
            kind: self.kind,
            len: self.value.len(),
            expected: 8,
        })?;
        Ok(u64::from_be_bytes(b))
    }

    /// A string, with the trailing NUL (if any) removed.
    pub(crate) fn string(&self) -> Result<&'a str, AttrError> {
        let v = self.value.strip_suffix(&[0]).unwrap_or(self.value);
        std::str::from_utf8(v).map_err(|_| AttrError::NotUtf8(self.kind))
    }
}

/// Iterates the attributes in a buffer; yields an error once and stops on malformed input.
pub(crate) struct AttrIter<'a> {
    buf: &'a [u8],
    offset: usize,
    failed: bool,
}

impl<'a> AttrIter<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Self {
            buf,
            offset: 0,
            failed: false,
        }
    }
}

impl<'a> Iterator for AttrIter<'a> {
    type Item = Result<Attr<'a>, AttrError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.offset >= self.buf.len() {
            return None;
        }
        let rest = &self.buf[self.offset..];
        if rest.len() < 4 {
            self.failed = true;
            return Some(Err(AttrError::Truncated(self.offset)));
        }
        let len = u16::from_ne_bytes([rest[0], rest[1]]) as usize;
        let kind = u16::from_ne_bytes([rest[2], rest[3]]) & 0x3fff;
        if len < 4 || len > rest.len() {
            self.failed = true;
            return Some(Err(AttrError::Overrun {
                offset: self.offset,
                len,
            }));
        }
        let value = &rest[4..len];
        self.offset += pad4(len).min(rest.len());
        Some(Ok(Attr { kind, value }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_attributes_read_back_with_padding_and_nesting() {
        let mut w = AttrWriter::new();
        w.string(1, "kubenft").be32(2, 0x4000).nested(3, |n| {
            n.u8(1, 6);
        });
        let attrs: Vec<_> = AttrIter::new(&w.buf).collect::<Result<_, _>>().unwrap();
        assert_eq!(attrs.len(), 3);
        assert_eq!(attrs[0].string().unwrap(), "kubenft");
        assert_eq!(attrs[1].be32().unwrap(), 0x4000);
        let inner: Vec<_> = AttrIter::new(attrs[2].value)
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(inner[0].value, [6]);
        assert_eq!(w.buf.len() % 4, 0);
    }

    #[test]
    fn a_length_past_the_end_is_an_error_not_a_panic() {
        let buf = [200u8, 0, 1, 0, 0, 0];
        let mut it = AttrIter::new(&buf);
        assert!(matches!(it.next(), Some(Err(AttrError::Overrun { .. }))));
        assert!(it.next().is_none());
    }
}
