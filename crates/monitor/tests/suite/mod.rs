mod dependencies;
mod run;
