// Package engines owns what this project knows about each inference engine's store client: the
// vehicle that carries its configuration (a projected file or the environment), the connector
// and kv_role it is given, the flags and variables this project owns or refuses, how its
// argument parser spells a flag, how it is launched, and the rules that merge an injected
// fragment into a container. It decides; it renders nothing (the generator does) and reads no
// cluster state (the injection package does).
package engines
