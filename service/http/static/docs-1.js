// The API reference page: swagger-ui (vendored, static/vendor/) over this node's OpenAPI document.
window.addEventListener("DOMContentLoaded", function () {
  var el = document.getElementById("swagger");
  if (!el || !window.SwaggerUIBundle) return;
  window.SwaggerUIBundle({
    url: el.dataset.url,
    domNode: el,
    deepLinking: true,
    tryItOutEnabled: false,
    persistAuthorization: false,
    validatorUrl: null
  });
});
