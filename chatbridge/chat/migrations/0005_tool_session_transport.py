from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("chatbridge_chat", "0004_journal_scope")]

    operations = [
        migrations.AddField(
            model_name="toolsession",
            name="transport",
            field=models.CharField(
                blank=True,
                default="chat",
                help_text="chat, mcp-push, mcp-mrtr, mcp-respond",
                max_length=20,
            ),
        ),
        migrations.AddField(
            model_name="toolsession",
            name="client",
            field=models.CharField(
                blank=True,
                default="",
                help_text="the MCP session id or caller digest",
                max_length=200,
            ),
        ),
    ]
