//! Clarifying questions a plan asks before it can run, typed so that every front end (the
//! terminal, the review page, an MCP client's elicitation form) asks them the same way.
//!
//! A question has a [`QuestionKind`] (what it is about), an [`InputMode`] (free text, a choice
//! among `options`, or a form whose fields are a JSON Schema) and, where one is safe, a
//! recommended `default`. A caller that asked not to be asked (`no_questions`), or a person who
//! declined to answer or let the question time out, gets the default, and the plan records it
//! as an [`Assumption`] in its `metadata.assumptions`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// What a clarifying question is about.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum QuestionKind {
    /// A value the plan needs and the request does not give (a required argument).
    #[default]
    MissingInfo,
    /// The request can be read more than one way.
    Ambiguity,
    /// Several ways to do it, or none of the tools fits: the person picks the approach.
    ApproachChoice,
    /// Something with lasting effects (a recurring schedule, a destructive call) to confirm.
    RiskConfirmation,
}

impl QuestionKind {
    /// The kind's name as serialized (`missing_info`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            QuestionKind::MissingInfo => "missing_info",
            QuestionKind::Ambiguity => "ambiguity",
            QuestionKind::ApproachChoice => "approach_choice",
            QuestionKind::RiskConfirmation => "risk_confirmation",
        }
    }
}

impl std::str::FromStr for QuestionKind {
    type Err = String;

    fn from_str(text: &str) -> Result<QuestionKind, String> {
        match text
            .trim()
            .to_ascii_lowercase()
            .replace(['-', ' '], "_")
            .as_str()
        {
            "missing_info" | "missing" | "missing_information" => Ok(QuestionKind::MissingInfo),
            "ambiguity" | "ambiguous" => Ok(QuestionKind::Ambiguity),
            "approach_choice" | "approach" | "choice" => Ok(QuestionKind::ApproachChoice),
            "risk_confirmation" | "risk" | "confirmation" | "confirm" => {
                Ok(QuestionKind::RiskConfirmation)
            }
            other => Err(format!(
                "unknown question kind `{other}` (missing_info, ambiguity, approach_choice, \
                 risk_confirmation)"
            )),
        }
    }
}

/// How a question is answered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum InputMode {
    /// Free text.
    #[default]
    Text,
    /// One of the question's `options`.
    Choice,
    /// The fields of the question's `schema` (a JSON Schema object of primitive fields).
    Form,
}

/// A clarifying question the plan needs answered before it can run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Question {
    /// Identifier (`q1`, `q2`, …).
    pub id: String,
    /// The question, in the plan's locale.
    pub text: String,
    /// The step this answer unblocks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// The argument of that step this answer fills.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub argument: Option<String>,
    /// Suggested answers, when the set is known (an enum, a yes/no confirmation).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
    /// What the question is about.
    #[serde(default)]
    pub kind: QuestionKind,
    /// How it is answered.
    #[serde(default)]
    pub input: InputMode,
    /// For [`InputMode::Form`]: the answer's JSON Schema, an object whose properties are
    /// primitive fields (string, number, integer, boolean, or a string enum).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub schema: Option<Value>,
    /// The recommended answer, taken (and recorded as an assumption) when the caller asked not
    /// to be asked, or the person declined or did not answer in time. Absent when no answer is
    /// safe to assume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
}

impl Question {
    /// A free-text question about missing information; the other fields are set by the
    /// builder methods.
    pub fn new(id: impl Into<String>, text: impl Into<String>) -> Question {
        Question {
            id: id.into(),
            text: text.into(),
            step: None,
            argument: None,
            options: Vec::new(),
            kind: QuestionKind::MissingInfo,
            input: InputMode::Text,
            schema: None,
            default: None,
        }
    }

    /// Of this kind.
    pub fn of_kind(mut self, kind: QuestionKind) -> Question {
        self.kind = kind;
        self
    }

    /// About `step` (and its `argument`, when one is given).
    pub fn about(mut self, step: impl Into<String>, argument: Option<String>) -> Question {
        self.step = Some(step.into());
        self.argument = argument;
        self
    }

    /// Answered by picking one of `options` (free text when there are none).
    pub fn choice(mut self, options: Vec<String>) -> Question {
        self.input = if options.is_empty() {
            InputMode::Text
        } else {
            InputMode::Choice
        };
        self.options = options;
        self
    }

    /// With the recommended answer `default`.
    pub fn recommend(mut self, default: impl Into<String>) -> Question {
        self.default = Some(default.into());
        self
    }

    /// Answered by filling `argument` of a tool call whose JSON Schema is `schema`: a choice
    /// for an enum, a one-field form for a number, integer, boolean or a string of a format
    /// forms know (email, uri, date, date-time: a client can check the value as it is typed), free text otherwise. The schema's own
    /// `default` becomes the recommended answer.
    pub fn for_argument(mut self, argument: &str, schema: Option<&Value>) -> Question {
        let Some(schema) = schema.and_then(Value::as_object) else {
            return self;
        };
        if let Some(default) = schema.get("default").filter(|d| !d.is_null()) {
            self.default = Some(answer_string(default));
        }
        let options: Vec<String> = schema
            .get("enum")
            .and_then(Value::as_array)
            .map(|values| values.iter().map(answer_string).collect())
            .unwrap_or_default();
        if !options.is_empty() {
            return self.choice(options);
        }
        let kind = schema.get("type").and_then(Value::as_str).unwrap_or("");
        // The string formats an MCP elicitation form may carry.
        let format = schema.get("format").and_then(Value::as_str);
        let typed = matches!(kind, "number" | "integer" | "boolean")
            || (kind == "string" && matches!(format, Some("email" | "uri" | "date" | "date-time")));
        if typed {
            let mut field = Map::new();
            for key in [
                "type",
                "format",
                "description",
                "minimum",
                "maximum",
                "minLength",
                "maxLength",
            ] {
                if let Some(value) = schema.get(key) {
                    field.insert(key.to_owned(), value.clone());
                }
            }
            self.input = InputMode::Form;
            self.schema = Some(json!({
                "type": "object",
                "properties": {argument: Value::Object(field)},
                "required": [argument],
            }));
        }
        self
    }

    /// The answer's JSON Schema as an MCP elicitation form asks for it (an object of primitive
    /// fields): the form's own schema, or one `answer` field, a string enum for a choice.
    pub fn answer_schema(&self) -> Value {
        if let (InputMode::Form, Some(schema)) = (self.input, &self.schema)
            && schema.get("properties").is_some_and(Value::is_object)
        {
            return schema.clone();
        }
        let mut field = json!({"type": "string", "title": "Answer", "description": self.text});
        if self.input == InputMode::Choice && !self.options.is_empty() {
            field["enum"] = json!(self.options);
        }
        if let Some(default) = &self.default {
            field["default"] = json!(default);
        }
        json!({"type": "object", "properties": {"answer": field}, "required": ["answer"]})
    }

    /// The answer, as the planner reads it, from what a form of [`Question::answer_schema`]
    /// returned: the `answer` field, or the form's fields as `name: value` pairs. `None` when
    /// the content holds nothing.
    pub fn answer_from(&self, content: &Value) -> Option<String> {
        let fields = content.as_object()?;
        if let Some(answer) = fields
            .get("answer")
            .filter(|_| self.input != InputMode::Form)
        {
            let text = answer_string(answer);
            return (!text.trim().is_empty()).then_some(text);
        }
        let parts: Vec<String> = fields
            .iter()
            .filter(|(_, value)| !value.is_null())
            .map(|(name, value)| match fields.len() {
                1 => answer_string(value),
                _ => format!("{name}: {}", answer_string(value)),
            })
            .collect();
        (!parts.is_empty()).then(|| parts.join(", "))
    }
}

/// A value as answer text: a string as it is, anything else as JSON.
fn answer_string(value: &Value) -> String {
    value
        .as_str()
        .map_or_else(|| value.to_string(), str::to_owned)
}

/// One answer to a question, given or assumed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Answer {
    /// The question's id.
    pub question: String,
    /// The answer.
    pub value: String,
    /// Why the answer was assumed (the question's recommended default, taken because the
    /// caller asked not to be asked, or the person declined or did not answer in time); `None`
    /// for an answer a person gave.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assumed: Option<String>,
}

/// An answer the planner assumed, as a plan records it in `metadata.assumptions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Assumption {
    /// The question's id in the version that asked it.
    pub question: String,
    /// The question.
    pub text: String,
    /// What it is about.
    pub kind: QuestionKind,
    /// The answer taken.
    pub answer: String,
    /// Why it was assumed.
    pub reason: String,
}

/// The recommended answers of `questions` that have one, each assumed for `reason`.
pub fn recommended_answers(questions: &[Question], reason: &str) -> Vec<Answer> {
    questions
        .iter()
        .filter_map(|q| {
            q.default.as_ref().map(|value| Answer {
                question: q.id.clone(),
                value: value.clone(),
                assumed: Some(reason.to_owned()),
            })
        })
        .collect()
}

/// The feedback text of a replan that answers `questions` with `answers`: each question with
/// its answer (assumed ones said to be assumed), and the questions left unanswered.
pub fn answers_text(questions: &[Question], answers: &[Answer]) -> String {
    let mut text = String::from("Answers to the questions:\n");
    for question in questions {
        match answers.iter().find(|a| a.question == question.id) {
            Some(answer) => {
                text.push_str(&format!("- {}: {}", question.text, answer.value));
                if answer.assumed.is_some() {
                    text.push_str(" (assumed: the recommended answer)");
                }
                text.push('\n');
            }
            None => text.push_str(&format!("- {}: (not answered)\n", question.text)),
        }
    }
    text
}

/// The assumptions among `answers` to `questions`, for the next version's
/// `metadata.assumptions`.
pub fn assumptions(questions: &[Question], answers: &[Answer]) -> Vec<Assumption> {
    answers
        .iter()
        .filter_map(|answer| {
            let reason = answer.assumed.as_ref()?;
            let question = questions.iter().find(|q| q.id == answer.question)?;
            Some(Assumption {
                question: question.id.clone(),
                text: question.text.clone(),
                kind: question.kind,
                answer: answer.value.clone(),
                reason: reason.clone(),
            })
        })
        .collect()
}

/// Adds `assumed` to the plan metadata's `assumptions` (kept from earlier versions).
pub fn record_assumptions(metadata: &mut Map<String, Value>, assumed: &[Assumption]) {
    if assumed.is_empty() {
        return;
    }
    let entry = metadata
        .entry("assumptions")
        .or_insert_with(|| Value::Array(Vec::new()));
    if !entry.is_array() {
        *entry = Value::Array(Vec::new());
    }
    if let Value::Array(list) = entry {
        list.extend(assumed.iter().filter_map(|a| serde_json::to_value(a).ok()));
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{
        Answer, InputMode, Question, QuestionKind, answers_text, assumptions, record_assumptions,
    };

    #[test]
    fn an_argument_question_is_typed_by_the_argument_schema() {
        let enumerated = Question::new("q1", "Which unit?").for_argument(
            "unit",
            Some(
                &json!({"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"}),
            ),
        );
        assert_eq!(enumerated.input, InputMode::Choice);
        assert_eq!(enumerated.options, ["celsius", "fahrenheit"]);
        assert_eq!(enumerated.default.as_deref(), Some("celsius"));
        assert_eq!(
            enumerated.answer_schema()["properties"]["answer"]["enum"],
            json!(["celsius", "fahrenheit"])
        );

        let number = Question::new("q2", "How many?")
            .for_argument("count", Some(&json!({"type": "integer", "minimum": 1})));
        assert_eq!(number.input, InputMode::Form);
        assert_eq!(
            number.answer_schema()["properties"]["count"],
            json!({"type": "integer", "minimum": 1})
        );
        assert_eq!(
            number.answer_from(&json!({"count": 3})).as_deref(),
            Some("3")
        );
        assert!(number.default.is_none());

        let text =
            Question::new("q3", "Who to?").for_argument("to", Some(&json!({"type": "string"})));
        assert_eq!(text.input, InputMode::Text);
        assert_eq!(
            text.answer_from(&json!({"answer": "bob"})).as_deref(),
            Some("bob")
        );
        assert_eq!(text.answer_from(&json!({"answer": "  "})), None);
    }

    #[test]
    fn questions_read_without_the_new_fields_are_free_text_missing_info() {
        let q: Question = serde_json::from_value(json!({"id": "q1", "text": "Where?"})).unwrap();
        assert_eq!(
            (q.kind, q.input),
            (QuestionKind::MissingInfo, InputMode::Text)
        );
        let written = serde_json::to_value(&q).unwrap();
        assert_eq!(written["kind"], "missing_info");
        assert_eq!(written["input"], "text");
        assert!("risk".parse::<QuestionKind>().is_ok());
        assert!("sometimes".parse::<QuestionKind>().is_err());
    }

    #[test]
    fn assumed_answers_are_said_and_recorded() {
        let questions = vec![
            Question::new("q1", "Repeat daily?")
                .of_kind(QuestionKind::RiskConfirmation)
                .choice(vec!["yes".into(), "no".into()])
                .recommend("no"),
            Question::new("q2", "Which city?"),
        ];
        let answers = super::recommended_answers(&questions, "no_questions");
        assert_eq!(answers.len(), 1);
        let text = answers_text(&questions, &answers);
        assert!(text.contains("Repeat daily?: no (assumed"), "{text}");
        assert!(text.contains("Which city?: (not answered)"), "{text}");
        let given = Answer {
            question: "q2".into(),
            value: "Paris".into(),
            assumed: None,
        };
        let mut all = answers.clone();
        all.push(given);
        let assumed = assumptions(&questions, &all);
        assert_eq!(assumed.len(), 1);
        let mut metadata = serde_json::Map::new();
        record_assumptions(&mut metadata, &assumed);
        record_assumptions(&mut metadata, &assumed);
        assert_eq!(metadata["assumptions"].as_array().map(Vec::len), Some(2));
        assert_eq!(metadata["assumptions"][0]["kind"], "risk_confirmation");
    }
}
