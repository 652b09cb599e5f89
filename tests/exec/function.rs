//! Function tools through a real threaded `Runtime` with async tasks: a good call, a bad
//! call answered `InvalidArguments` with the exact list of violations and then
//! corrected by the same task, a closure's error, a panic (the executor goes on
//! serving), unknown tools and kinds; and the schema (JSON Schema through the
//! `jsonschema` crate) keyword by keyword, with its construction errors.

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
                /location/alt: property is not allowed; \
                /location/lat: expected a number, got \"north\"; \
                /location/lon: required property is missing; \
                /units: \"kelvin\" is not one of \"celsius\" or \"fahrenheit\"; \
                /when: property is not allowed",
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
        message(
            "t",
            json!({"type": "object", "properties": {"a": {"type": "strng"}}})
        ),
        Err(
            "at /properties/a/type: \"strng\" is not valid under any of the schemas \
             listed in the 'anyOf' keyword"
                .to_owned()
        )
    );
    // A keyword JSON Schema does not define is ignored, as the drafts say.
    assert_eq!(
        register("t", json!({"type": "object", "propreties": {}})),
        Ok(2)
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

// --- The schema: JSON Schema through the `jsonschema` crate ---------------------------

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
        assert_eq!(
            violations(&schema, bad.clone()),
            [format!("(root): expected {}, got {bad}", article(name))]
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
        ["(root): expected an integer, a string or null, got 1.5"]
    );
    // No `type`, or `true`: anything; `false`: nothing.
    assert!(violations(&json!({}), json!([{"a": null}])).is_empty());
    assert!(violations(&json!(true), json!(1)).is_empty());
    assert_eq!(
        violations(&json!(false), json!(1)),
        ["(root): False schema does not allow 1"]
    );
}

#[test]
fn properties_required_and_additional_properties() {
    let schema = json!({
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name"],
    });
    assert!(violations(&schema, json!({"name": "Ada"})).is_empty());
    // Undeclared properties are allowed unless additionalProperties says otherwise.
    assert!(violations(&schema, json!({"name": "Ada", "extra": [1]})).is_empty());
    assert_eq!(
        violations(&schema, json!({"age": "old"})),
        [
            "/age: expected an integer, got \"old\"",
            "/name: required property is missing",
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
        ["/b: property is not allowed", "/z: property is not allowed"]
    );
    // additionalProperties as a schema, which the old subset refused.
    let counts = json!({"type": "object", "additionalProperties": {"type": "integer"}});
    assert_eq!(
        violations(&counts, json!({"a": 1, "b": "2"})),
        ["/b: expected an integer, got \"2\""]
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
fn items_min_items_max_items_and_nested_arrays() {
    let schema = json!({
        "type": "array",
        "items": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
        "minItems": 1,
        "maxItems": 3,
    });
    assert!(violations(&schema, json!([{"n": 1}, {"n": 2}])).is_empty());
    assert_eq!(
        violations(&schema, json!([])),
        ["(root): must have at least 1 item"]
    );
    assert_eq!(
        violations(&schema, json!([{"n": 1}, {"n": "2"}, {}, {"n": 4}])),
        [
            "(root): must have at most 3 items",
            "/1/n: expected an integer, got \"2\"",
            "/2/n: required property is missing",
        ]
    );
    // A matrix: arrays of arrays, each row of two numbers; indexes order as numbers.
    let matrix = json!({
        "type": "array",
        "items": {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2},
    });
    assert!(violations(&matrix, json!([[1, 2], [3.5, 4]])).is_empty());
    let mut rows = vec![json!([0, 0]); 12];
    rows[2] = json!([1, "x"]);
    rows[10] = json!([1]);
    assert_eq!(
        violations(&matrix, Value::Array(rows)),
        [
            "/2/1: expected a number, got \"x\"",
            "/10: must have at least 2 items",
        ]
    );
    // prefixItems, which the old subset refused.
    let pair = json!({"prefixItems": [{"type": "string"}, {"type": "integer"}], "items": false});
    assert!(violations(&pair, json!(["a", 1])).is_empty());
    assert_eq!(
        violations(&pair, json!([1, 1, 2])),
        [
            "/0: expected a string, got 1",
            "/2: False schema does not allow 2"
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
        ["(root): \"b\" is not one of \"a\", 1 or 3 other candidates"]
    );
    assert_eq!(
        violations(&json!({"enum": ["celsius", "fahrenheit"]}), json!("kelvin")),
        ["(root): \"kelvin\" is not one of \"celsius\" or \"fahrenheit\""]
    );
    let constant = json!({"const": {"version": 2}});
    assert!(violations(&constant, json!({"version": 2.0})).is_empty());
    assert_eq!(
        violations(&constant, json!({"version": 3})),
        ["(root): must be {\"version\":2}"]
    );
    // `const: null` is a constraint too.
    assert_eq!(
        violations(&json!({"const": null}), json!(0)),
        ["(root): must be null"]
    );
}

#[test]
fn bounds_on_numbers_and_lengths() {
    let schema = json!({"type": "number", "minimum": -1.5, "maximum": 10, "multipleOf": 0.5});
    for good in [json!(-1.5), json!(0), json!(10), json!(10.0)] {
        assert!(violations(&schema, good.clone()).is_empty(), "{good}");
    }
    assert_eq!(
        violations(&schema, json!(-2)),
        ["(root): must be at least -1.5, got -2"]
    );
    assert_eq!(
        violations(&schema, json!(10.25)),
        [
            "(root): 10.25 is not a multiple of 0.5",
            "(root): must be at most 10, got 10.25",
        ]
    );
    let exclusive = json!({"exclusiveMinimum": 0});
    assert_eq!(
        violations(&exclusive, json!(0)),
        ["(root): must be greater than 0, got 0"]
    );
    // Lengths count characters: three characters, six bytes.
    let text = json!({"type": "string", "minLength": 2, "maxLength": 3});
    assert!(violations(&text, json!("żół")).is_empty());
    assert_eq!(
        violations(&text, json!("a")),
        ["(root): must be at least 2 characters long"]
    );
    assert_eq!(
        violations(&text, json!("abcd")),
        ["(root): must be at most 3 characters long"]
    );
}

#[test]
fn any_of_one_of_and_ref_to_defs() {
    // What an OpenAI tool definition says: a nullable field as anyOf, shared shapes in $defs.
    let schema = json!({
        "type": "object",
        "properties": {
            "deadline": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "shape": {"oneOf": [{"$ref": "#/$defs/circle"}, {"$ref": "#/$defs/square"}]},
            "points": {"type": "array", "items": {"$ref": "#/$defs/point"}},
        },
        "$defs": {
            "point": {
                "type": "object",
                "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                "required": ["x", "y"],
                "additionalProperties": false,
            },
            "circle": {"type": "object", "properties": {"r": {"type": "number"}}, "required": ["r"]},
            "square": {"type": "object", "properties": {"side": {"type": "number"}}, "required": ["side"]},
        },
    });
    let good = json!({
        "deadline": null,
        "shape": {"r": 2},
        "points": [{"x": 0, "y": 1}],
    });
    assert!(violations(&schema, good).is_empty());
    assert_eq!(
        violations(
            &schema,
            json!({
                "deadline": 5,
                "shape": {"r": 1, "side": 1},
                "points": [{"x": 0, "y": 1}, {"x": "0"}, {"x": 1, "y": 2, "z": 3}],
            })
        ),
        [
            "/deadline: 5 is not valid under any of the schemas listed in the 'anyOf' keyword",
            "/points/1/x: expected a number, got \"0\"",
            "/points/1/y: required property is missing",
            "/points/2/z: property is not allowed",
            "/shape: {\"r\":1,\"side\":1} is valid under more than one of the schemas listed in the 'oneOf' keyword",
        ]
    );
    assert_eq!(
        violations(&schema, json!({"shape": {}})),
        ["/shape: {} is not valid under any of the schemas listed in the 'oneOf' keyword"]
    );
    // A recursive schema: a tree of named nodes.
    let tree = json!({
        "$ref": "#/$defs/node",
        "$defs": {"node": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
            "required": ["name"],
        }},
    });
    assert_eq!(
        violations(
            &tree,
            json!({"name": "a", "children": [{"name": "b", "children": [{"name": 3}]}]})
        ),
        ["/children/0/children/0/name: expected a string, got 3"]
    );
}

#[test]
fn pattern_and_format_are_asserted() {
    let schema = json!({
        "type": "object",
        "properties": {
            "code": {"type": "string", "pattern": "^[A-Z]{3}$"},
            "day": {"type": "string", "format": "date"},
            "email": {"type": "string", "format": "email"},
            "id": {"type": "string", "format": "uuid"},
            "vendor": {"type": "string", "format": "x-not-a-format"},
        },
    });
    let good = json!({
        "code": "LIS",
        "day": "2026-11-26",
        "email": "ada@example.com",
        "id": "67e55044-10b1-426f-9247-bb680e5fe0c8",
        "vendor": "anything",
    });
    assert!(violations(&schema, good).is_empty());
    assert_eq!(
        violations(
            &schema,
            json!({"code": "lis", "day": "tomorrow", "email": "ada", "id": "1", "vendor": "x"})
        ),
        [
            "/code: must match the pattern ^[A-Z]{3}$, got \"lis\"",
            "/day: \"tomorrow\" is not a \"date\"",
            "/email: \"ada\" is not a \"email\"",
            "/id: \"1\" is not a \"uuid\"",
        ]
    );
}

#[test]
fn every_violation_is_listed_sorted_by_path_then_message() {
    let schema = json!({
        "type": "object",
        "properties": {
            "items": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"name": {"type": "string", "minLength": 1}, "qty": {"type": "integer", "minimum": 1}},
                    "required": ["name", "qty"],
                },
            },
            "count": {"type": "integer", "minimum": 0, "enum": [1, 2, 3]},
        },
        "required": ["items", "count", "id"],
    });
    let value = json!({
        "count": -4,
        "items": [{"name": "a", "qty": 1}, {"name": "b", "qty": 0}, {"name": 7}],
    });
    let schema = Schema::new(schema).expect("compiles");
    let violation = |path: &str, message: &str| Violation {
        path: path.to_owned(),
        message: message.to_owned(),
    };
    assert_eq!(
        schema.check(&value),
        Err(vec![
            violation("/count", "-4 is not one of 1, 2 or 3"),
            violation("/count", "must be at least 0, got -4"),
            violation("/id", "required property is missing"),
            violation("/items/1/qty", "must be at least 1, got 0"),
            violation("/items/2/name", "expected a string, got 7"),
            violation("/items/2/qty", "required property is missing"),
        ])
    );
}

#[test]
fn description_title_and_unknown_keywords_are_not_checked() {
    let schema = json!({
        "type": "string",
        "description": "A city.",
        "title": "City",
        "examples": ["Lisbon"],
        "x-vendor": {"any": "thing"},
    });
    assert!(violations(&schema, json!("Lisbon")).is_empty());
    let schema = Schema::new(schema).expect("compiles");
    assert_eq!(schema.description(), Some("A city."));
    assert!(!schema.is_object());
    assert!(
        Schema::new(json!({"type": ["object"]}))
            .expect("compiles")
            .is_object()
    );
}

#[test]
fn the_draft_is_2020_12_unless_schema_names_another() {
    // 2020-12 by default: `prefixItems` constrains, `$defs` resolves.
    let tuple = json!({"prefixItems": [{"type": "integer"}]});
    assert_eq!(
        violations(&tuple, json!(["x"])),
        ["/0: expected an integer, got \"x\""]
    );
    // Draft 7 named by `$schema`: `items` as an array is its tuple form, and
    // `prefixItems` means nothing.
    let draft7 = json!({
        "$schema": "http://json-schema.org/draft-07/schema#",
        "items": [{"type": "integer"}],
        "prefixItems": [{"type": "string"}],
    });
    assert_eq!(
        violations(&draft7, json!(["x"])),
        ["/0: expected an integer, got \"x\""]
    );
    // Under 2020-12, `items` must be one schema.
    assert_eq!(
        schema_error(json!({"items": [{"type": "integer"}]})),
        "at /items: [{\"type\":\"integer\"}] is not of types \"boolean\", \"object\""
    );
}

#[test]
fn schema_errors_at_construction_say_where_and_what() {
    let cases = [
        (
            json!("object"),
            "at the schema's root: \"object\" is not of types \"boolean\", \"object\"",
        ),
        (
            json!({"type": "strng"}),
            "at /type: \"strng\" is not valid under any of the schemas listed in the 'anyOf' keyword",
        ),
        (
            json!({"properties": {"a": {"minLength": -1}}}),
            "at /properties/a/minLength: -1 is less than the minimum of 0",
        ),
        (
            json!({"required": "a"}),
            "at /required: \"a\" is not of type \"array\"",
        ),
        (
            json!({"properties": {"a": {"pattern": "(unclosed"}}}),
            "at /properties/a/pattern: \"(unclosed\" is not a \"regex\"",
        ),
        (
            json!({"items": {"$ref": "#/$defs/missing"}}),
            "at the schema's root: Pointer '/$defs/missing' does not exist",
        ),
        (
            json!({"$ref": "https://example.com/schemas/point.json"}),
            "`https://example.com/schemas/point.json` is outside the schema and is not \
             fetched: put what it refers to under `$defs` and refer to it as `#/$defs/...`",
        ),
    ];
    for (schema, message) in cases {
        assert_eq!(schema_error(schema.clone()), message, "{schema}");
    }
    // Typed, for a caller that matches.
    assert_eq!(
        Schema::new(json!({"$ref": "other.json"})).map(|_| ()),
        Err(SchemaError::ExternalReference {
            uri: "other.json".to_owned(),
        })
    );
    assert!(matches!(
        Schema::new(json!({"minItems": "1"})),
        Err(SchemaError::Invalid { path, .. }) if path == "/minItems"
    ));
    // What the old subset refused as contradictory is valid JSON Schema (no value fits).
    assert_eq!(
        schema_error(json!({"minimum": 5, "maximum": 4.5})),
        "compiled"
    );
}

/// "a string", "an object", "null": a JSON type as the violations name it.
fn article(name: &str) -> String {
    match name {
        "null" => "null".to_owned(),
        "array" | "integer" | "object" => format!("an {name}"),
        _ => format!("a {name}"),
    }
}
