//! Reading a JSON object one field at a time, straight into what the proxy keeps of it.
//!
//! Guarantees: a field the proxy reads must have the JSON type k8s-openapi expects there, or
//! the object is refused as k8s-openapi refuses it; a field it does not read is skipped
//! unchecked; a string without escapes is borrowed from the input, not copied.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, Visitor};

use crate::cluster::kept::Text;
use crate::cluster::shared_name;

/// A JSON string, borrowed from the input where it has no escapes.
pub(super) struct Str<'de>(pub(super) Cow<'de, str>);

impl<'de> Deserialize<'de> for Str<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct StrVisitor;
        impl<'de> Visitor<'de> for StrVisitor {
            type Value = Str<'de>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }

            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Borrowed(v)))
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Owned(v.to_string())))
            }

            fn visit_string<E: de::Error>(self, v: String) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Owned(v)))
            }
        }
        d.deserialize_string(StrVisitor)
    }
}

/// A JSON object read one field at a time into `Self`; fields it does not know are skipped.
pub(super) trait Fields<'de>: Default {
    /// What the object is, for error messages.
    const WHAT: &'static str;

    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error>;
}

/// Skips the value of a field the proxy does not read.
pub(super) fn skip<'de, A: MapAccess<'de>>(map: &mut A) -> Result<(), A::Error> {
    map.next_value::<IgnoredAny>().map(drop)
}

/// `T` decoded from a JSON object by its `Fields`.
pub(super) struct Object<T>(pub(super) T);

impl<'de, T: Fields<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct ObjectVisitor<T>(PhantomData<T>);
        impl<'de, T: Fields<'de>> Visitor<'de> for ObjectVisitor<T> {
            type Value = Object<T>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(T::WHAT)
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Object<T>, A::Error> {
                let mut fields = T::default();
                while let Some(key) = map.next_key::<Str<'de>>()? {
                    fields.field(&key.0, &mut map)?;
                }
                Ok(Object(fields))
            }
        }
        d.deserialize_map(ObjectVisitor(PhantomData))
    }
}

/// A string that many objects repeat (a namespace, a node, a protocol), shared.
pub(super) fn word(s: Option<Str<'_>>) -> Option<Text> {
    s.map(|s| shared_name(&s.0))
}

/// A string of its own (a name, an address).
pub(super) fn text(s: Option<Str<'_>>) -> Option<Text> {
    s.map(|s| s.0.as_ref().into())
}

/// A string field whose value must be `expected`, as k8s-openapi checks `apiVersion` and `kind`.
pub(super) fn expect_value<'de, A: MapAccess<'de>>(
    map: &mut A,
    expected: &str,
) -> Result<(), A::Error> {
    let value: Str<'de> = map.next_value()?;
    if value.0 != expected {
        return Err(de::Error::invalid_value(
            de::Unexpected::Str(&value.0),
            &expected,
        ));
    }
    Ok(())
}

/// An object of which the proxy reads one field, `F::KEY` (null or absent: `None`).
pub(super) struct Only<F: OnlyField>(pub(super) Option<F::Value>);

/// The one field `Only` reads, and the object it is read from.
pub(super) trait OnlyField {
    const WHAT: &'static str;
    const KEY: &'static str;
    type Value;
}

impl<F: OnlyField> Default for Only<F> {
    fn default() -> Self {
        Only(None)
    }
}

impl<F: OnlyField> Only<F> {
    pub(super) fn value(self) -> Option<F::Value> {
        self.0
    }
}

impl<'de, F: OnlyField> Fields<'de> for Only<F>
where
    F::Value: Deserialize<'de>,
{
    const WHAT: &'static str = F::WHAT;

    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        if key == F::KEY {
            self.0 = map.next_value()?;
            Ok(())
        } else {
            skip(map)
        }
    }
}
