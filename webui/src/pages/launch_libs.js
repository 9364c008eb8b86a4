// The libraries only the launch form needs (pages/launch.js), in a bundle of their own
// (scripts/build-webui.sh: /chunks/launch_libs.js) loaded when the form is first shown:
// yaml parses the config, nanotar writes the context's tar.gz, ignore applies
// gitignore rules (the built-in patterns and .detignore).

export { default as ignore } from "ignore";
export { createTarGzip } from "nanotar";
export { default as YAML } from "yaml";
