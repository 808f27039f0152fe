package deploytest

import (
	"encoding/json"

	"k8s.io/apimachinery/pkg/api/resource"
)

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func resourceQuantity(s string) resource.Quantity { return resource.MustParse(s) }
