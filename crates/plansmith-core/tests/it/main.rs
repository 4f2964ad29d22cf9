mod parse;
mod pipeline;
