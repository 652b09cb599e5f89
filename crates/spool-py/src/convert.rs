//! JSON values between Rust and Python.
//!
//! What crosses into spool — task inputs, request payloads, results, tool arguments — is
//! JSON: `dict` with `str` keys, `list`/`tuple`, `str`, `int`, `float`, `bool` and `None`,
//! and objects that say how they are JSON (a pydantic model's `model_dump()`, a
//! dataclass). Anything else is refused with a `TypeError` naming the path to it, before
//! spool accepts it. What comes back is plain Python, with every JSON object an
//! [`Answer`](../python/spool/_answer.py) (a `dict` whose keys read as attributes too).

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::{Map, Number, Value};

/// The Python class JSON objects come back as (`spool._answer.Answer`).
static ANSWER: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

fn answer_class(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    ANSWER
        .get_or_try_init(py, || {
            Ok::<_, PyErr>(py.import("spool._answer")?.getattr("Answer")?.unbind())
        })
        .map(|class| class.bind(py))
}

/// `value` as Python: objects as `Answer`s, arrays as lists.
pub(crate) fn to_py<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                i.into_pyobject(py)?.into_any()
            } else if let Some(u) = n.as_u64() {
                u.into_pyobject(py)?.into_any()
            } else {
                n.as_f64().unwrap_or(f64::NAN).into_pyobject(py)?.into_any()
            }
        }
        Value::String(s) => PyString::new(py, s).into_any(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(to_py(py, item)?)?;
            }
            list.into_any()
        }
        Value::Object(map) => {
            let dict = PyDict::new(py);
            for (k, v) in map {
                dict.set_item(k, to_py(py, v)?)?;
            }
            answer_class(py)?.call1((dict,))?
        }
    })
}

/// `object` as JSON, or a `TypeError` naming where in it a value is not JSON.
pub(crate) fn from_py(object: &Bound<'_, PyAny>) -> PyResult<Value> {
    let mut path = String::new();
    convert(object, &mut path, 0)
}

/// How deep a value may nest: a cycle (a list holding itself) ends here with an error.
const MAX_DEPTH: usize = 256;

fn convert(object: &Bound<'_, PyAny>, path: &mut String, depth: usize) -> PyResult<Value> {
    if depth > MAX_DEPTH {
        return Err(PyValueError::new_err(format!(
            "value at `{}` nests deeper than {MAX_DEPTH} levels (a cycle?)",
            shown(path)
        )));
    }
    if object.is_none() {
        return Ok(Value::Null);
    }
    // bool before int: True is an int in Python.
    if let Ok(b) = object.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if let Ok(i) = object.cast::<PyInt>() {
        if let Ok(v) = i.extract::<i64>() {
            return Ok(Value::from(v));
        }
        if let Ok(v) = i.extract::<u64>() {
            return Ok(Value::from(v));
        }
        return Err(PyValueError::new_err(format!(
            "integer at `{}` does not fit in 64 bits",
            shown(path)
        )));
    }
    if let Ok(f) = object.cast::<PyFloat>() {
        let v = f.value();
        return Number::from_f64(v).map(Value::Number).ok_or_else(|| {
            PyValueError::new_err(format!(
                "float at `{}` is {v}, which JSON cannot hold",
                shown(path)
            ))
        });
    }
    if let Ok(s) = object.cast::<PyString>() {
        return Ok(Value::String(s.to_cow()?.into_owned()));
    }
    if let Ok(dict) = object.cast::<PyDict>() {
        let mut map = Map::new();
        for (k, v) in dict.iter() {
            let Ok(key) = k.cast::<PyString>() else {
                return Err(PyTypeError::new_err(format!(
                    "key {} at `{}` is not a str: JSON object keys are strings",
                    k.repr().map(|r| r.to_string()).unwrap_or_default(),
                    shown(path)
                )));
            };
            let key = key.to_cow()?;
            let len = path.len();
            path.push('/');
            path.push_str(&key);
            let value = convert(&v, path, depth + 1)?;
            path.truncate(len);
            map.insert(key.into_owned(), value);
        }
        return Ok(Value::Object(map));
    }
    if object.cast::<PyList>().is_ok() || object.cast::<PyTuple>().is_ok() {
        let mut items = Vec::new();
        for (i, item) in object.try_iter()?.enumerate() {
            let len = path.len();
            path.push('/');
            path.push_str(&i.to_string());
            items.push(convert(&item?, path, depth + 1)?);
            path.truncate(len);
        }
        return Ok(Value::Array(items));
    }
    // A pydantic model (v2), then a dataclass instance.
    if let Ok(dump) = object.getattr("model_dump") {
        // JSON mode: dates, UUIDs and the like as the strings pydantic makes of them.
        let kwargs = PyDict::new(object.py());
        kwargs.set_item("mode", "json")?;
        let dumped = dump.call((), Some(&kwargs)).or_else(|_| dump.call0())?;
        return convert(&dumped, path, depth + 1);
    }
    let py = object.py();
    let dataclasses = py.import("dataclasses")?;
    if dataclasses
        .getattr("is_dataclass")?
        .call1((object,))?
        .is_truthy()?
        && !object.is_instance_of::<pyo3::types::PyType>()
    {
        let dumped = dataclasses.getattr("asdict")?.call1((object,))?;
        return convert(&dumped, path, depth + 1);
    }
    Err(PyTypeError::new_err(format!(
        "value at `{}` is of type `{}`, which is not JSON (use dict, list, str, int, float, bool, \
         None, a dataclass or a pydantic model)",
        shown(path),
        object
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_else(|_| "?".into())
    )))
}

fn shown(path: &str) -> &str {
    if path.is_empty() { "/" } else { path }
}
