//! Function tools through a real threaded `Runtime` with async tasks: a good call, a bad
//! call answered `InvalidArguments` with the exact list of violations and then
//! corrected by the same task, a closure's error, a panic (the executor goes on
//! serving), unknown tools and kinds; and the schema subset keyword by keyword, with
//! its construction errors.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};
use spool_core::{Kind, NewTask, RequestError, TaskError, TaskState, async_task};
use spool_exec::{FunctionTools, Schema, SchemaError, Violation};
use spool_runtime::Runtime;

/// The weather tool's schema: a nested object, a bounded number, an enum, no extras.
fn weather_schema() -> Value {
    json!({
        "type": "object",
        "description": "Today's forecast at a place.",
        "properties": {
            "location": {
                "type": "object",
                "properties": {
                    "lat": {"type": "number", "minimum": -90, "maximum": 90},
                    "lon": {"type": "number", "minimum": -180, "maximum": 180},
                },
                "required": ["lat", "lon"],
                "additionalProperties": false,
            },
            "units": {"enum": ["celsius", "fahrenheit"]},
        },
        "required": ["location"],
        "additionalProperties": false,
    })
}

/// `weather`, `fails` (always refuses) and `explode` (always panics); `calls` counts
/// the runs of `weather`'s closure.
fn tools(calls: Arc<AtomicUsize>) -> FunctionTools {
    let empty = json!({"type": "object", "additionalProperties": false});
    FunctionTools::new()
        .register("weather", weather_schema(), move |args| {
            calls.fetch_add(1, Ordering::SeqCst);
            let lat = args["location"]["lat"].as_f64().unwrap_or_default();
            let units = args["units"].as_str().unwrap_or("celsius");
            Ok(json!({"forecast": if lat > 0.0 { "sunny" } else { "rain" }, "units": units}))
        })
        .and_then(|tools| {
            tools.register("fails", empty.clone(), |_| {
                Err("the forecast service is down".to_owned())
            })
        })
        .and_then(|tools| {
            tools.register("explode", empty, |_| -> Result<Value, String> {
                panic!("boom at the tool")
            })
        })
        .expect("the test's schemas compile")
}

/// Runs one async task to its end on a runtime built by `build`, and returns its state.
fn run_task(
    build: impl FnOnce(spool_runtime::RuntimeBuilder) -> spool_runtime::RuntimeBuilder,
    task: spool_core::AsyncTask,
) -> (TaskState, spool_core::Stats) {
    let mut runtime = build(Runtime::builder()).build();
    let id = runtime
        .submit(NewTask::new(task))
        .expect("the runtime takes the task")
        .id;
    runtime.run_until_idle();
    let state = runtime.task_state(id).expect("the task is retained");
    (state, runtime.scheduler().stats().clone())
}

#[test]
fn a_good_call_runs_the_closure_and_answers_its_value() {
    let calls = Arc::new(AtomicUsize::new(0));
    let functions = tools(calls.clone());
    let task = async_task("good", |cx| async move {
        let answer = cx
            .tool(
                "weather",
                json!({"location": {"lat": 38.7, "lon": -9.1}, "units": "fahrenheit"}),
            )
            .await?;
        Ok(answer)
    });
    let (state, stats) = run_task(|b| b.tools(functions), task);
    assert_eq!(
        state,
        TaskState::Completed(Ok(json!({"forecast": "sunny", "units": "fahrenheit"})))
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!((stats.requests, stats.answers), (1, 1));
}

#[test]
fn a_bad_call_is_answered_invalid_arguments_and_the_task_corrects_itself() {
    let calls = Arc::new(AtomicUsize::new(0));
    let functions = tools(calls.clone());
    let task = async_task("corrects_itself", |cx| async move {
        let bad = json!({"location": {"lat": "north", "alt": 12}, "units": "kelvin", "when": 1});
        let first = cx.tool("weather", bad).await;
        let Err(RequestError::InvalidArguments { message }) = first else {
            return Err(TaskError::failed(format!(
                "expected InvalidArguments, got {first:?}"
            )));
        };
        // What an LLM would do with the message: fix each argument it names.
        let fixed = json!({"location": {"lat": 38.7, "lon": -9.1}, "units": "celsius"});
        let second = cx.tool("weather", fixed).await?;
        Ok(json!({"first": message, "second": second}))
    });
    let (state, stats) = run_task(|b| b.tools(functions), task);
    assert_eq!(
        state,
        TaskState::Completed(Ok(json!({
            "first": "arguments of `weather` do not fit its schema: \
                /location/lat: expected a number, got \"north\"; \
                /location/lon: required property missing; \
                /location/alt: unexpected property (allowed: lat, lon); \
                /units: expected one of \"celsius\", \"fahrenheit\", got \"kelvin\"; \
                /when: unexpected property (allowed: location, units)",
            "second": {"forecast": "sunny", "units": "celsius"},
        })))
    );
    // The bad call never reached the closure.
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!((stats.requests, stats.answers), (2, 2));
}

#[test]
fn the_closures_error_is_answered_failed_with_its_message() {
    let functions = tools(Arc::default());
    let task = async_task("fails", |cx| async move {
        let answer = cx.tool("fails", json!({})).await?;
        Ok(answer)
    });
    let (state, _) = run_task(|b| b.tools(functions), task);
    assert_eq!(
        state,
        TaskState::Completed(Err(TaskError::RequestFailed {
            error: RequestError::failed("the forecast service is down"),
        }))
    );
}

#[test]
fn a_panic_is_answered_failed_and_the_executor_keeps_serving() {
    let calls = Arc::new(AtomicUsize::new(0));
    let functions = tools(calls.clone());
    let task = async_task("survives", |cx| async move {
        let mut seen = Vec::new();
        for _ in 0..2 {
            let exploded = cx.tool("explode", json!({})).await;
            seen.push(json!(format!("{exploded:?}")));
            let weather = cx
                .tool("weather", json!({"location": {"lat": -33.9, "lon": 18.4}}))
                .await?;
            seen.push(weather);
        }
        Ok(Value::Array(seen))
    });
    let (state, stats) = run_task(|b| b.tools(functions), task);
    let panicked = format!(
        "{:?}",
        Err::<Value, _>(RequestError::failed(
            "the function tool `explode` panicked: boom at the tool"
        ))
    );
    let weather = json!({"forecast": "rain", "units": "celsius"});
    assert_eq!(
        state,
        TaskState::Completed(Ok(json!([panicked, weather, panicked, weather])))
    );
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!((stats.requests, stats.answers), (4, 4));
}

#[test]
fn an_unknown_tool_or_kind_is_answered_failed() {
    let functions = tools(Arc::default());
    // Installed per name: `tool:weather` and, wrongly, the LLM and `tool:nope`.
    let task = async_task("unknown", |cx| async move {
        let nope = cx.tool("nope", json!({})).await;
        let llm = cx.llm(json!({"messages": []})).await;
        let weather = cx
            .tool("weather", json!({"location": {"lat": 1, "lon": 2}}))
            .await?;
        Ok(json!([format!("{nope:?}"), format!("{llm:?}"), weather]))
    });
    let (state, _) = run_task(
        |b| {
            b.executor(Kind::tool("weather"), functions.clone())
                .executor(Kind::tool("nope"), functions.clone())
                .executor(Kind::Llm, functions)
        },
        task,
    );
    let nope = Err::<Value, _>(RequestError::failed("no function tool named `nope`"));
    let llm = Err::<Value, _>(RequestError::failed(
        "function tools serve tool requests, not `llm`",
    ));
    assert_eq!(
        state,
        TaskState::Completed(Ok(json!([
            format!("{nope:?}"),
            format!("{llm:?}"),
            {"forecast": "sunny", "units": "celsius"},
        ])))
    );
}

#[test]
fn a_pool_of_clones_serves_one_tool_on_several_threads() {
    let calls = Arc::new(AtomicUsize::new(0));
    let functions = tools(calls.clone());
    let task = async_task("fan_out", |cx| async move {
        let requests = (0..8)
            .map(|i| cx.tool("weather", json!({"location": {"lat": i, "lon": 0}})))
            .collect();
        let answers: Result<Vec<Value>, RequestError> =
            cx.all(requests).await.into_iter().collect();
        Ok(Value::Array(answers?))
    });
    let (state, _) = run_task(
        move |b| b.pool(Kind::tool("weather"), 3, move || functions.clone()),
        task,
    );
    let mut expected = vec![json!({"forecast": "rain", "units": "celsius"})];
    expected.extend(std::iter::repeat_n(
        json!({"forecast": "sunny", "units": "celsius"}),
        7,
    ));
    assert_eq!(state, TaskState::Completed(Ok(Value::Array(expected))));
    assert_eq!(calls.load(Ordering::SeqCst), 8);
}

#[test]
fn definitions_are_the_openai_tools_array_in_registration_order() {
    let functions = tools(Arc::default());
    assert_eq!(
        functions.names().collect::<Vec<_>>(),
        ["weather", "fails", "explode"]
    );
    let empty = json!({"type": "object", "additionalProperties": false});
    // The schema's description is the tool's, said once.
    let mut parameters = weather_schema();
    parameters
        .as_object_mut()
        .and_then(|schema| schema.remove("description"));
    assert_eq!(
        functions.definitions(),
        json!([
            {"type": "function", "function": {
                "name": "weather",
                "description": "Today's forecast at a place.",
                "parameters": parameters,
            }},
            {"type": "function", "function": {"name": "fails", "parameters": empty}},
            {"type": "function", "function": {"name": "explode", "parameters": empty}},
        ])
    );
}

#[test]
fn registration_refuses_bad_names_duplicates_non_object_and_bad_schemas() {
    let ok = |_: &Value| Ok(Value::Null);
    let object = json!({"type": "object"});
    let register = |name: &str, schema: Value| {
        FunctionTools::new()
            .register("taken", json!({"type": "object"}), ok)
            .and_then(|tools| tools.register(name, schema, ok))
            .map(|tools| tools.names().count())
    };
    let message = |name: &str, schema: Value| register(name, schema).map_err(|e| e.to_string());
    assert_eq!(register("get_weather-2", object.clone()), Ok(2));
    for name in ["", "has space", "dot.ted", "é", &"x".repeat(65)] {
        assert_eq!(
            register(name, object.clone()),
            Err(SchemaError::InvalidToolName {
                name: name.to_owned()
            })
        );
    }
    assert_eq!(register(&"x".repeat(64), object.clone()), Ok(2));
    assert_eq!(
        message("taken", object),
        Err("a function tool named `taken` is already registered".to_owned())
    );
    for schema in [
        json!({}),
        json!({"type": "string"}),
        json!({"type": ["object", "null"]}),
    ] {
        assert_eq!(
            message("t", schema),
            Err("the arguments schema of `t` must have \"type\": \"object\"".to_owned())
        );
    }
    assert_eq!(
        message("t", json!({"type": "object", "propreties": {}})),
        Err(
            "at the schema's root: unsupported keyword `propreties` (supported: type, \
             properties, required, additionalProperties, items, enum, const, minimum, \
             maximum, minLength, maxLength, minItems, maxItems, description, title)"
                .to_owned()
        )
    );
}

#[test]
fn call_in_process_gives_the_same_answers_as_the_executor() {
    let functions = tools(Arc::default());
    assert_eq!(
        functions.call("weather", &json!({"location": {"lat": 1, "lon": 1}})),
        Ok(json!({"forecast": "sunny", "units": "celsius"}))
    );
    assert_eq!(
        functions.call("weather", &json!([])),
        Err(RequestError::InvalidArguments {
            message:
                "arguments of `weather` do not fit its schema: (root): expected an object, got []"
                    .to_owned()
        })
    );
    assert_eq!(
        functions.call("nope", &json!({})),
        Err(RequestError::failed("no function tool named `nope`"))
    );
    assert!(functions.schema("weather").is_some());
    assert!(functions.schema("nope").is_none());
}

// --- The schema subset ---------------------------------------------------------------

/// The violations of `value` against `schema`, as displayed; empty if it fits.
fn violations(schema: &Value, value: Value) -> Vec<String> {
    let schema = Schema::new(schema.clone()).expect("the schema compiles");
    match schema.check(&value) {
        Ok(()) => Vec::new(),
        Err(violations) => violations.iter().map(ToString::to_string).collect(),
    }
}

/// The message of the error `Schema::new` gives for `schema`.
fn schema_error(schema: Value) -> String {
    match Schema::new(schema) {
        Ok(_) => "compiled".to_owned(),
        Err(error) => error.to_string(),
    }
}

#[test]
fn type_accepts_its_values_and_names_the_others() {
    let cases: [(&str, Value, Value); 7] = [
        ("object", json!({}), json!([])),
        ("array", json!([1]), json!({})),
        ("string", json!(""), json!(1)),
        ("number", json!(-1.5), json!("1")),
        ("integer", json!(3), json!(3.5)),
        ("boolean", json!(false), json!(0)),
        ("null", json!(null), json!(false)),
    ];
    for (name, good, bad) in cases {
        let schema = json!({"type": name});
        assert_eq!(violations(&schema, good), Vec::<String>::new(), "{name}");
        let article = match name {
            "null" => "",
            "object" | "array" | "integer" => "an ",
            _ => "a ",
        };
        assert_eq!(
            violations(&schema, bad.clone()),
            [format!("(root): expected {article}{name}, got {bad}")]
        );
    }
    // An integer is any number without a fraction; a number may be an integer.
    assert!(violations(&json!({"type": "integer"}), json!(2.0)).is_empty());
    assert!(violations(&json!({"type": "integer"}), json!(u64::MAX)).is_empty());
    assert!(violations(&json!({"type": "number"}), json!(7)).is_empty());
    // A list of types.
    let nullable = json!({"type": ["string", "integer", "null"]});
    assert!(violations(&nullable, json!(null)).is_empty());
    assert!(violations(&nullable, json!("x")).is_empty());
    assert_eq!(
        violations(&nullable, json!(1.5)),
        ["(root): expected a string, an integer or null, got 1.5"]
    );
    // No `type`: anything.
    assert!(violations(&json!({}), json!([{"a": null}])).is_empty());
}

#[test]
fn properties_required_and_additional_properties() {
    let schema = json!({
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name"],
    });
    assert!(violations(&schema, json!({"name": "Ada"})).is_empty());
    // Undeclared properties are allowed unless additionalProperties is false.
    assert!(violations(&schema, json!({"name": "Ada", "extra": [1]})).is_empty());
    assert_eq!(
        violations(&schema, json!({"age": "old"})),
        [
            "/age: expected an integer, got \"old\"",
            "/name: required property missing"
        ]
    );
    let closed = json!({
        "type": "object",
        "properties": {"a": {}},
        "additionalProperties": false,
    });
    assert!(violations(&closed, json!({"a": 1})).is_empty());
    assert_eq!(
        violations(&closed, json!({"z": 1, "b": 2})),
        [
            "/b: unexpected property (allowed: a)",
            "/z: unexpected property (allowed: a)"
        ]
    );
    let nothing = json!({"type": "object", "additionalProperties": false});
    assert_eq!(
        violations(&nothing, json!({"x": 1})),
        ["/x: unexpected property (none are allowed)"]
    );
    // Pointer escaping of odd property names.
    let odd = json!({"properties": {"a/b": {"type": "null"}, "c~d": {"type": "null"}}});
    assert_eq!(
        violations(&odd, json!({"a/b": 1, "c~d": 2})),
        ["/a~1b: expected null, got 1", "/c~0d: expected null, got 2"]
    );
    // `properties` says nothing of a value that is not an object.
    assert!(violations(&odd, json!("text")).is_empty());
}

#[test]
fn items_min_items_and_max_items() {
    let schema = json!({
        "type": "array",
        "items": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
        "minItems": 1,
        "maxItems": 3,
    });
    assert!(violations(&schema, json!([{"n": 1}, {"n": 2}])).is_empty());
    assert_eq!(
        violations(&schema, json!([])),
        ["(root): expected at least 1 item, got 0"]
    );
    assert_eq!(
        violations(&schema, json!([{"n": 1}, {"n": "2"}, {}, {"n": 4}])),
        [
            "(root): expected at most 3 items, got 4",
            "/1/n: expected an integer, got \"2\"",
            "/2/n: required property missing",
        ]
    );
}

#[test]
fn enum_and_const_compare_as_json_schema_does() {
    let schema = json!({"enum": ["a", 1, null, [1, 2], {"k": true}]});
    for good in [
        json!("a"),
        json!(1.0),
        json!(null),
        json!([1, 2.0]),
        json!({"k": true}),
    ] {
        assert!(violations(&schema, good.clone()).is_empty(), "{good}");
    }
    assert_eq!(
        violations(&schema, json!("b")),
        ["(root): expected one of \"a\", 1, null, [1,2], {\"k\":true}, got \"b\""]
    );
    let constant = json!({"const": {"version": 2}});
    assert!(violations(&constant, json!({"version": 2.0})).is_empty());
    assert_eq!(
        violations(&constant, json!({"version": 3})),
        ["(root): expected {\"version\":2}, got {\"version\":3}"]
    );
    // `const: null` is a constraint too.
    assert_eq!(
        violations(&json!({"const": null}), json!(0)),
        ["(root): expected null, got 0"]
    );
}

#[test]
fn minimum_and_maximum_are_inclusive() {
    let schema = json!({"type": "number", "minimum": -1.5, "maximum": 10});
    for good in [json!(-1.5), json!(0), json!(10), json!(10.0)] {
        assert!(violations(&schema, good.clone()).is_empty(), "{good}");
    }
    assert_eq!(
        violations(&schema, json!(-2)),
        ["(root): expected at least -1.5, got -2"]
    );
    assert_eq!(
        violations(&schema, json!(10.25)),
        ["(root): expected at most 10, got 10.25"]
    );
    // Large integers compare exactly.
    let big = json!({"type": "integer", "maximum": 9007199254740992_u64});
    assert_eq!(
        violations(&big, json!(9007199254740993_u64)),
        ["(root): expected at most 9007199254740992, got 9007199254740993"]
    );
    // No `type`: bounds say nothing of a string.
    assert!(violations(&json!({"minimum": 5}), json!("3")).is_empty());
}

#[test]
fn min_length_and_max_length_count_characters() {
    let schema = json!({"type": "string", "minLength": 2, "maxLength": 3});
    assert!(violations(&schema, json!("ab")).is_empty());
    // Three characters, six bytes.
    assert!(violations(&schema, json!("żół")).is_empty());
    assert_eq!(
        violations(&schema, json!("a")),
        ["(root): expected at least 2 characters, got 1"]
    );
    assert_eq!(
        violations(&schema, json!("abcd")),
        ["(root): expected at most 3 characters, got 4"]
    );
    assert_eq!(
        violations(&json!({"maxLength": 1}), json!("ab")),
        ["(root): expected at most 1 character, got 2"]
    );
}

#[test]
fn description_and_title_are_not_checked() {
    let schema = json!({"type": "string", "description": "A city.", "title": "City"});
    assert!(violations(&schema, json!("Lisbon")).is_empty());
    assert_eq!(
        Schema::new(schema).expect("compiles").description(),
        Some("A city.")
    );
}

#[test]
fn every_violation_is_listed_in_a_fixed_order() {
    let schema = json!({
        "type": "object",
        "properties": {
            "tags": {"type": "array", "items": {"type": "string", "minLength": 1}},
            "count": {"type": "integer", "minimum": 0, "enum": [1, 2, 3]},
        },
        "required": ["tags", "count", "id"],
    });
    let value = json!({"count": -4, "tags": ["", 7, "ok"]});
    let schema = Schema::new(schema).expect("compiles");
    assert_eq!(
        schema.check(&value),
        Err(vec![
            Violation {
                path: "/count".to_owned(),
                message: "expected one of 1, 2, 3, got -4".to_owned()
            },
            Violation {
                path: "/count".to_owned(),
                message: "expected at least 0, got -4".to_owned()
            },
            Violation {
                path: "/tags/0".to_owned(),
                message: "expected at least 1 character, got 0".to_owned()
            },
            Violation {
                path: "/tags/1".to_owned(),
                message: "expected a string, got 7".to_owned()
            },
            Violation {
                path: "/id".to_owned(),
                message: "required property missing".to_owned()
            },
        ])
    );
}

#[test]
fn schema_errors_at_construction_say_where_and_what() {
    let cases = [
        (
            json!("object"),
            "at the schema's root: a schema must be a JSON object, got \"object\"",
        ),
        (
            json!({"properties": {"a": {"type": "string", "maxLenght": 3}}}),
            "at /properties/a: unsupported keyword `maxLenght` (supported: type, properties, \
             required, additionalProperties, items, enum, const, minimum, maximum, minLength, \
             maxLength, minItems, maxItems, description, title)",
        ),
        (
            json!({"items": {"$ref": "#/defs/x"}}),
            "at /items: unsupported keyword `$ref` (supported: type, properties, required, \
             additionalProperties, items, enum, const, minimum, maximum, minLength, maxLength, \
             minItems, maxItems, description, title)",
        ),
        (
            json!({"type": "strng"}),
            "at the schema's root: unknown type \"strng\" (the types: object, array, string, number, integer, boolean, null)",
        ),
        (
            json!({"type": 3}),
            "at the schema's root: `type` must be a type name or a non-empty array of distinct type names, got 3",
        ),
        (
            json!({"type": []}),
            "at the schema's root: `type` must be a type name or a non-empty array of distinct type names, got []",
        ),
        (
            json!({"type": ["null", "null"]}),
            "at the schema's root: `type` must be a type name or a non-empty array of distinct type names, got [\"null\",\"null\"]",
        ),
        (
            json!({"properties": []}),
            "at the schema's root: `properties` must be an object of schemas, got []",
        ),
        (
            json!({"properties": {"a/b": 1}}),
            "at /properties/a~1b: a schema must be a JSON object, got 1",
        ),
        (
            json!({"required": "a"}),
            "at the schema's root: `required` must be an array of property names, got \"a\"",
        ),
        (
            json!({"required": ["a", "a"]}),
            "at the schema's root: `required` must be an array of distinct property names, got [\"a\",\"a\"]",
        ),
        (
            json!({"additionalProperties": {}}),
            "at the schema's root: `additionalProperties` must be true or false, got {}",
        ),
        (
            json!({"items": [{}]}),
            "at the schema's root: `items` must be one schema (an object) for every item, got [{}]",
        ),
        (
            json!({"enum": []}),
            "at the schema's root: `enum` must be a non-empty array of values, got []",
        ),
        (
            json!({"minimum": "0"}),
            "at the schema's root: `minimum` must be a number, got \"0\"",
        ),
        (
            json!({"maxItems": -1}),
            "at the schema's root: `maxItems` must be a non-negative integer, got -1",
        ),
        (
            json!({"minLength": 1.5}),
            "at the schema's root: `minLength` must be a non-negative integer, got 1.5",
        ),
        (
            json!({"description": 1}),
            "at the schema's root: `description` must be a string, got 1",
        ),
        (
            json!({"type": "number", "minLength": 1}),
            "at the schema's root: `minLength` applies to strings, but the type is number",
        ),
        (
            json!({"type": ["string", "null"], "minimum": 1}),
            "at the schema's root: `minimum` applies to numbers, but the type is string, null",
        ),
        (
            json!({"type": "string", "items": {}}),
            "at the schema's root: `items` applies to arrays, but the type is string",
        ),
        (
            json!({"type": "array", "required": []}),
            "at the schema's root: `required` applies to objects, but the type is array",
        ),
        (
            json!({"minimum": 5, "maximum": 4.5}),
            "at the schema's root: no value can fit: minimum 5 is above maximum 4.5",
        ),
        (
            json!({"minItems": 3, "maxItems": 2}),
            "at the schema's root: no value can fit: minItems 3 is above maxItems 2",
        ),
        (
            json!({"minLength": 1, "maxLength": 0}),
            "at the schema's root: no value can fit: minLength 1 is above maxLength 0",
        ),
        (
            json!({"properties": {"x": {"properties": {"a": {}}, "required": ["b"], "additionalProperties": false}}}),
            "at /properties/x: no value can fit: `b` is required but not among the properties, and additionalProperties is false",
        ),
    ];
    for (schema, message) in cases {
        assert_eq!(schema_error(schema.clone()), message, "{schema}");
    }
    // Typed, for a caller that matches.
    assert_eq!(
        Schema::new(json!({"properties": {"a": {"minimun": 1}}})).map(|_| ()),
        Err(SchemaError::UnsupportedKeyword {
            path: "/properties/a".to_owned(),
            keyword: "minimun".to_owned(),
        })
    );
    // The same keywords where they apply compile.
    assert_eq!(
        schema_error(json!({"type": ["string", "integer"], "minLength": 1, "minimum": 0})),
        "compiled"
    );
}
