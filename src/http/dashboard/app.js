// The ojsd dashboard (placeholder until the pages land).
document.getElementById("app").textContent = "ojsd";
