// Starts Swagger UI on the OpenAPI document this Postern serves. A file rather than an inline
// script: the page's Content-Security-Policy allows scripts from Postern itself only.
/* global SwaggerUIBundle */
window.ui = SwaggerUIBundle({
  url: '/v1/openapi.json',
  dom_id: '#swagger-ui',
  deepLinking: true,
  // No badge fetched from validator.swagger.io: the page talks to Postern only.
  validatorUrl: null,
  presets: [SwaggerUIBundle.presets.apis],
  layout: 'BaseLayout',
});
