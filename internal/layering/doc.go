// Package layering holds the test that keeps nodemend's imports pointing one
// way (docs/architecture.md): every package of the module belongs to one
// layer, a layer imports only the layers below it that it is allowed to, and
// no shipped binary links test support. The layer table is in
// layering_test.go; the page shows the same table, and the test fails while
// the two differ.
package layering
