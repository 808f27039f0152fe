package deploytest

import (
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// controllerClient authenticates with only a token of the controller's
// ServiceAccount, as its pods get.
func controllerClient(t *testing.T) kubernetes.Interface {
	t.Helper()
	tr := Must[*authenticationv1.TokenRequest](t)(admin.CoreV1().ServiceAccounts(Namespace).CreateToken(t.Context(), "nodemend-controller",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{}))
	return Must[*kubernetes.Clientset](t)(kubernetes.NewForConfig(configFor(tr.Status.Token)))
}
